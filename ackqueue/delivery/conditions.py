"""What the queue's collaborators share: its lock and conditions, and its lifecycle.

``queue.Queue`` makes the mutex and its three conditions; the queue adds ``landed`` (a get
waiting for puts still committing) and :class:`ReadyListeners` (waiters that are not threads:
an event loop's gets, see :mod:`ackqueue.aio`). Every collaborator's ``*_locked`` method runs
with the mutex held, and each wakes the waiters its change concerns.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ackqueue.errors import AsyncUsageError, QueueClosedError, ShutDown


def _running_loop() -> object | None:
    """The event loop running in this thread, if any. asyncio is not imported for it: a loop
    runs only where asyncio was imported, and importing it costs a program that never uses
    it about a fifth of a second at start (every worker process and command-line call)."""
    aio = sys.modules.get("asyncio")
    return None if aio is None else aio._get_running_loop()


class ReadyListeners:
    """One-shot callbacks of waiters that do not wait on ``not_empty`` (coroutines awaiting a
    get): each is called at most once, when an item may have become ready for it.

    Items becoming ready wake as many listeners as items, in the order they started waiting;
    a change every waiter must look at (close, shutdown, resume) wakes them all. A callback
    runs with the queue's mutex held, in whatever thread made the change: it must only hand
    the news on (``loop.call_soon_threadsafe``), never call back into the queue.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: OrderedDict[int, Callable[[], None]] = OrderedDict()
        self._tokens = itertools.count()
        self.loops = 0  # event loops using the queue now: blocking gets on their thread fail
        self.warned_blocking = False  # a plain queue's blocking get on a loop's thread: once

    def add(self, wake: Callable[[], None]) -> int:
        """Call ``wake()`` at the next item ready; returns a token for :meth:`discard`."""
        token = next(self._tokens)
        with self._lock:
            self._waiting[token] = wake
        return token

    def discard(self, token: int) -> bool:
        """Stop waiting; False if the listener was woken already (it may owe a wake-up)."""
        with self._lock:
            return self._waiting.pop(token, None) is not None

    def wake(self, n: int | None = 1) -> None:
        """Wake the ``n`` longest-waiting listeners (all of them when ``n`` is None)."""
        if not self._waiting:  # read without the lock: a waiter adds itself before it looks
            return
        with self._lock:
            if n is None or n >= len(self._waiting):
                woken = list(self._waiting.values())
                self._waiting.clear()
            else:
                woken = [self._waiting.popitem(last=False)[1] for _ in range(n)]
        for wake in woken:
            wake()

    def __len__(self) -> int:
        return len(self._waiting)

    def forget_after_fork(self) -> None:
        """In a child made by fork: no listener (their event loops are the parent's), and the
        lock free, whichever of the parent's threads held it."""
        _reinit_lock(self._lock)
        self._waiting.clear()
        self.loops = 0

    def check_may_block(self, what: str) -> None:
        """Refuse a blocking ``what`` on a thread that runs an event loop using this queue:
        it would stop every task of that loop, the very ones that could unblock it.

        On a loop that does not use the queue through an AsyncAckQueue (a plain AckQueue got
        from inside ``async def``), warn once with a RuntimeWarning instead: the get may well
        return (another thread puts), but every task of the loop stands still meanwhile, and
        code that did this knowingly goes on working.
        """
        if _running_loop() is None:
            return
        if self.loops:
            raise AsyncUsageError(
                f"{what} would block the event loop running in this thread, and every task "
                "on it; in a coroutine use the AsyncAckQueue's own awaitable (await q.get(), "
                "await c.get()), or call the blocking method from another thread"
            )
        if not self.warned_blocking:
            self.warned_blocking = True
            warnings.warn(
                f"{what} on the thread of a running event loop stops every task of that loop "
                "until an item comes; in async code use AsyncAckQueue (await q.get()), "
                "get_nowait(), or a thread (await asyncio.to_thread(q.get))",
                RuntimeWarning,
                stacklevel=_levels_to_caller(),
            )


def _levels_to_caller() -> int:
    """The ``stacklevel`` of the first frame outside ackqueue, seen from the caller's caller:
    a warning names the user's line, however deep inside the package it was raised."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


@dataclass(eq=False)
class Signals:
    mutex: threading.Lock
    not_empty: threading.Condition
    not_full: threading.Condition
    all_tasks_done: threading.Condition
    landed: threading.Condition
    listeners: ReadyListeners = field(default_factory=ReadyListeners)

    def ready_locked(self, n: int | None = 1) -> None:
        """``n`` items became ready (None: something every waiting get must look at)."""
        notify_waiting(self.not_empty, n)
        self.listeners.wake(n)

    def wake_all_locked(self) -> None:
        self.not_empty.notify_all()
        self.not_full.notify_all()
        self.all_tasks_done.notify_all()  # a join sees a close
        self.landed.notify_all()
        self.listeners.wake(None)

    def reset_after_fork(self) -> None:
        """In a child made by fork: the mutex free and nobody waiting. The threads that held
        or waited on them are the parent's, absent here; left as they were, the child's first
        ``put``, ``get``, ``qsize`` or even ``close()`` of the queue (which must say it is
        closed here) waited for ever for a lock that nobody would release. (A thread that
        forks while it holds the mutex itself must not release it after: nothing does.)"""
        _reinit_lock(self.mutex)
        for condition in (self.not_empty, self.not_full, self.all_tasks_done, self.landed):
            waiters = getattr(condition, "_waiters", None)  # CPython's list of waiting threads
            if waiters is not None:
                waiters.clear()
        self.listeners.forget_after_fork()


def _reinit_lock(lock: threading.Lock) -> None:
    """Make ``lock`` free again in a child made by fork, in place (every holder of a
    reference keeps it): CPython's own after-fork reset, as its logging module uses, or a
    release where that is missing."""
    reinit = getattr(lock, "_at_fork_reinit", None)
    if reinit is not None:
        reinit()
    elif lock.locked():
        lock.release()


def notify_waiting(condition: threading.Condition, n: int | None = 1) -> None:
    """``condition.notify(n)`` (``notify_all()`` with None), the mutex held, skipped when no
    thread waits: the mutex keeps its list of waiters as it is meanwhile. Nobody waits at most
    puts and gets, and a notify that finds nobody still costs three Python calls and a round
    trip of the lock (``Condition._is_owned``)."""
    waiters = getattr(condition, "_waiters", True)  # CPython's; elsewhere, always notify
    if waiters:
        if n is None:
            condition.notify_all()
        else:
            condition.notify(n)


class Lifecycle:
    """Whether a queue is open, shut down (``shutdown()``) or drained (an immediate one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.shut_down = False
        self.drained = False
        self.paused = False  # no deliveries until resumed (stored: see QueueRecord.paused)
        self.opened_by: int | None = None  # set in a child made by fork: the parent's pid

    def check_open(self) -> None:
        if self.closed:
            if self.opened_by is not None:
                raise QueueClosedError(
                    f"queue {self.name!r} was opened in process {self.opened_by}, before the "
                    "fork that made this process: open the queue again here (the parent's "
                    "queue objects, their files and sessions, stay the parent's)"
                )
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def check_can_put(self) -> None:
        if self.closed or self.shut_down:  # once a put, and then nearly always False
            self.check_open()
            raise self.shut_down_error()

    def shut_down_error(self) -> ShutDown:
        return ShutDown(f"queue {self.name!r} was shut down")


class Tasks:
    """``queue.Queue``'s count of unfinished tasks, which ``join()`` waits on.

    It exists before the standard library's ``__init__`` sets the count, and learns the
    condition ``join()`` waits on once that ``__init__`` has made it (:meth:`wake_on`).
    """

    def __init__(self) -> None:
        self.unfinished = 0
        self._all_done: threading.Condition | None = None

    def wake_on(self, all_tasks_done: threading.Condition) -> None:
        self._all_done = all_tasks_done

    def added_locked(self, n: int) -> None:
        self.unfinished += n

    def finished_locked(self, n: int) -> None:
        """``n`` items left the queue for good (acked, dead-lettered): ``task_done`` for them."""
        if not n:
            return
        self.unfinished = max(0, self.unfinished - n)
        if self.unfinished == 0 and self._all_done is not None:
            self._all_done.notify_all()
