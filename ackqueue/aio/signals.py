"""SIGINT and SIGTERM for a pool running on an event loop: the loop's own signal handlers
(``loop.add_signal_handler``), which run as callbacks between tasks, never inside one."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def handle_stop_signals(on_signal: Callable[[int], None]) -> Callable[[], None]:
    """Call ``on_signal(signum)`` on SIGINT and SIGTERM while the running loop runs on the
    main thread (elsewhere signals are not ours); returns what puts back the handlers that
    were there before."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)

    def restore() -> None:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)

    return restore
