"""Awaiting an item without a thread: try to take one at once, else wait to be told.

The sync core tells its :class:`~ackqueue.delivery.conditions.ReadyListeners` whenever items
become ready; a waiting coroutine is one such listener, a future resolved through
``loop.call_soon_threadsafe``. Ten thousand coroutines awaiting ``get()`` are ten thousand
futures, not threads, and a put wakes as many of them as it made items ready, longest-waiting
first.

A waiter adds itself *before* it tries to take, so an item that becomes ready between its try
and its wait still wakes it. A waiter woken that then leaves without trying again (it was
cancelled, or timed out) passes its wake-up on, so the item it was woken for is not left
waiting while others sleep.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ackqueue.aio.running import wake_threadsafe
from ackqueue.delivery.conditions import ReadyListeners
from ackqueue.errors import Empty

T = TypeVar("T")


async def take_when_ready(
    listeners: ReadyListeners, attempt: Callable[[], Awaitable[T]], timeout: float | None
) -> T:
    """The result of the first ``attempt()`` that does not raise ``Empty``; ``Empty`` once
    ``timeout`` seconds have passed without one (never, when it is None)."""
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        woken: asyncio.Future[None] = loop.create_future()
        token = listeners.add(functools.partial(wake_threadsafe, loop, woken))
        leaving = True  # by a return or an exception, not to try again
        took = False
        try:
            try:
                result = await attempt()
                took = True
                return result
            except Empty:
                pass
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise Empty
            if remaining is None:
                await woken
            else:
                try:
                    await asyncio.wait_for(woken, remaining)
                except asyncio.TimeoutError:
                    raise Empty from None
            leaving = False
        finally:
            if not listeners.discard(token) and leaving and not took:
                # Woken, and leaving without the try that wake-up was for: hand it on.
                listeners.wake(1)
