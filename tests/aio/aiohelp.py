"""Helpers for the asyncio tests: real event loops (asyncio.run), real files."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from polling import bounded

from ackqueue.aio import AsyncAckQueue
from ackqueue.queue.queues import ready_listeners


async def wait_for_waiters(q: AsyncAckQueue[Any], n: int, timeout: float = 10.0) -> None:
    """Return once ``n`` coroutines are waiting for an item of ``q`` (its ready listeners):
    the async twin of polling.wait_for_waiter, without sleeping and hoping."""
    listeners = ready_listeners(q.sync)
    deadline = time.monotonic() + timeout
    while len(listeners) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(listeners)} of {n} waiters after {timeout} s")
        await asyncio.sleep(0.001)


def run_ends(main: Callable[[], Coroutine[Any, Any, None]], seconds: float, what: str) -> None:
    """``asyncio.run(main())`` on a thread, which must end within ``seconds``: a hang fails
    the test saying ``what`` instead of holding up the suite (asyncio.run waits for every
    thread of its loop's executor, so a thread left waiting keeps it from returning)."""
    runner = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    runner.start()
    runner.join(seconds)
    assert not runner.is_alive(), what


async def eventually(predicate: Any, timeout: float = 10.0, what: str = "") -> None:
    """Await until ``predicate()`` is true (the loop keeps running meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(0.001)


def stored(path: str, shared: bool = False) -> list[Any]:
    """What the queue file holds, read after the async queue is closed (through a consumer
    that acks nothing; ``shared`` for a file that processes share)."""
    from conftest import stored_items

    import ackqueue

    if not shared:
        return stored_items(path)
    with ackqueue.AckQueue(path, shared=True) as q, q.connect() as c:
        items = []
        for _ in bounded(10_000_000, "reading the stored items"):
            try:
                items.append(c.get_nowait())
            except ackqueue.Empty:
                return items
