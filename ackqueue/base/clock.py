"""Time as the queue sees it: wall-clock epoch seconds, injectable for tests.

Delays (``not_before``) must mean the same after a restart, so deadlines are epoch times from
``time.time`` rather than monotonic ones. Tests pass a :class:`ManualClock` and move time by
hand: every queue using it fires what fell due at once, in the thread that advanced it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

Clock = Callable[[], float]


class ManualClock:
    """A clock that moves only when :meth:`advance` is called.

    Pass it as ``AckQueue(..., clock=ManualClock())`` to test delays, leases and retries
    without waiting. ``start`` is its first reading, in epoch seconds (default: now).
    """

    manual = True

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()
        self._listeners: weakref.WeakSet[_Listener] = weakref.WeakSet()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward and let every queue on this clock act on what fell due."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            self._now += seconds
            listeners = list(self._listeners)
        for listener in listeners:
            listener.on_time_moved()

    def subscribe(self, listener: _Listener) -> None:
        """Have ``listener.on_time_moved()`` called each time the clock is advanced."""
        with self._lock:
            self._listeners.add(listener)


class _Listener:
    def on_time_moved(self) -> None:
        raise NotImplementedError
