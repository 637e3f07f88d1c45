"""Where an async queue's blocking work runs: threads, so that the event loop never waits.

A commit waits for its fsync; run on the loop thread it would stop every task. So a call that
commits runs on the queue's :class:`Runner`: a bounded pool of threads for single calls (their
commits meet in the store's group commit, one fsync for all that arrive together), and
*lanes*, single threads lent to one ``async with ... transaction():`` block each, because a
transaction belongs to the thread that opened it and every operation inside it must run there.

A call handed to a thread runs to its end even if the task awaiting it is cancelled: an ack
that was committing is then either committed or still held, never half done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from ackqueue.errors import QueueClosedError

T = TypeVar("T")

# The transaction the current task is inside, if any (see transactions.py): its lane while
# it is open. Tasks started inside a block inherit it (a gather of puts joins the block); the
# block's end closes it for them too, since its lane then goes back to the runner, to be lent
# to the next transaction: a task still running afterwards must not join that one.
_inside: contextvars.ContextVar[LaneLoan | None] = contextvars.ContextVar(
    "ackqueue_lane", default=None
)


class Lane:
    """One thread, lent to one transaction at a time."""

    def __init__(self, name: str) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)


class LaneLoan:
    """A lane lent to one transaction, until the transaction ends."""

    __slots__ = ("lane",)

    def __init__(self, lane: Lane) -> None:
        self.lane: Lane | None = lane

    def end(self) -> None:
        self.lane = None


def current_lane() -> Lane | None:
    """The lane of the open transaction the current task is inside, or None."""
    loan = _inside.get()
    return None if loan is None else loan.lane


def enter_lane(lane: Lane) -> tuple[LaneLoan, contextvars.Token[LaneLoan | None]]:
    """Mark the current task (and the tasks it starts) as inside a transaction on ``lane``."""
    loan = LaneLoan(lane)
    return loan, _inside.set(loan)


def leave_lane(loan: LaneLoan, token: contextvars.Token[LaneLoan | None]) -> None:
    """The transaction ended: for this task, and for every task that inherited it."""
    loan.end()
    _inside.reset(token)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A shielded call whose awaiting task was cancelled: nobody else reads its outcome."""
    if not future.cancelled():
        future.exception()


class Runner:
    """``threads`` threads for single calls, and up to ``threads`` lanes for transactions."""

    def __init__(self, threads: int, name: str) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads!r}")
        self._name = name
        self._pool = self._new_pool(threads)
        self._max_lanes = threads
        self._lanes = 0
        self._idle: list[Lane] = []
        self._lane_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lock = threading.Lock()
        self.closed = False
        _runners.add(self)

    def _new_pool(self, threads: int) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix=f"ackqueue-aio-{self._name}"
        )

    def forget_after_fork(self) -> None:
        """In a child made by fork: the threads of the pool and the lanes are the parent's,
        absent here, and a call handed to them waited for ever (a parent's ``AsyncAckQueue``
        in the child: its ``get`` or ``close()`` hung). Fresh ones run the call, which then
        says what the queue says here: that it is closed."""
        self._lock = threading.Lock()
        self._lanes, self._idle, self._lane_waiters = 0, [], []
        if not self.closed:
            self._pool = self._new_pool(self._max_lanes)

    def start(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Start ``fn(*args, **kwargs)`` on a thread (the current transaction's lane if the
        task is inside one); the future is this loop's."""
        lane = current_lane()
        executor = self._pool if lane is None else lane.executor
        loop = asyncio.get_running_loop()
        try:
            return loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))
        except RuntimeError:
            if self.closed:
                raise QueueClosedError(f"queue {self._name!r} is closed") from None
            raise

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a thread; cancelling the awaiting task does not stop it."""
        return await shielded(self.start(fn, *args, **kwargs))

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a thread and forget it (giving back what a task held)."""
        if not self.closed:
            self._pool.submit(fn, *args)

    # -- lanes ---------------------------------------------------------------------------------

    async def borrow_lane(self) -> Lane:
        while True:
            with self._lock:
                if self._idle:
                    return self._idle.pop()
                if self._lanes < self._max_lanes:
                    self._lanes += 1
                    return Lane(f"ackqueue-tx-{self._name}")
                loop = asyncio.get_running_loop()
                waiter: asyncio.Future[None] = loop.create_future()
                self._lane_waiters.append((loop, waiter))
            await waiter

    def give_back_lane(self, lane: Lane) -> None:
        """From any thread: the transaction on ``lane`` has committed or rolled back."""
        with self._lock:
            self._idle.append(lane)
            waiters, self._lane_waiters = self._lane_waiters, []
        for loop, waiter in waiters:
            wake_threadsafe(loop, waiter)

    def close(self) -> None:
        """Let the calls under way finish; refuse new ones."""
        self.closed = True
        self._pool.shutdown(wait=True)
        with self._lock:
            idle, self._idle = self._idle, []
        for lane in idle:
            lane.executor.shutdown(wait=True)


# Every runner of this process, for _after_fork.
_runners: weakref.WeakSet[Runner] = weakref.WeakSet()


def _after_fork() -> None:
    for runner in list(_runners):
        runner.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


async def shielded(future: asyncio.Future[T]) -> T:
    """Await ``future``; a cancellation of the awaiting task leaves it running to its end."""
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_retrieve)
        raise


def wake_threadsafe(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve ``future`` on its loop, from any thread; a closed loop has nobody to wake."""

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    with contextlib.suppress(RuntimeError):  # a closed loop: its waiters are gone
        loop.call_soon_threadsafe(wake)
