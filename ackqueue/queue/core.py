"""What the queue's operations work with: one queue's state objects (:class:`Core`), and what one
thread's call carries to the hooks (:class:`Calls`).

Each state object owns its own state; the :class:`Core` only hands the same ones to every
operation (puts, claims, deliveries), once, when the queue opens (:mod:`.assembly`).

``queue.Queue.put`` and ``get`` do the blocking, timeouts and ``maxsize`` and call the hooks
``_put`` and ``_get`` with the mutex held; what a hook needs beyond the item (the priority of
a put, the deadline and consumer of a get) and what it hands back (the staged put, the claim)
travel in a :class:`Calls`, one per thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ackqueue.base.clock import Clock
from ackqueue.delivery.conditions import Lifecycle, Signals, Tasks
from ackqueue.delivery.holds import HoldTable
from ackqueue.delivery.mode import Mode
from ackqueue.delivery.supply import Claim, Supply
from ackqueue.errors import ItemLoadError, ShutDown
from ackqueue.queue.metrics import Meter
from ackqueue.storage.book import Book
from ackqueue.storage.items import Staged

_StdShutDown = getattr(queue, "ShutDown", None)


class Calls(threading.local):
    op: str | None = None  # "put" or "get" while the standard library's runs
    priority: int = 0  # of the put under way
    staged: Staged | None = None  # what ``_put`` staged
    deadline: float | None = None  # a get's, in time.monotonic() seconds
    getter: HoldTable | None = None  # the consumer a get is for, if any
    claim: Claim | None = None  # what ``_get`` claimed
    unloadable: tuple[Any, ItemLoadError] | None = None  # what ``_get`` could not load

    def getter_closed(self) -> bool:
        """Whether the consumer this thread is getting for was closed while it waited."""
        table = self.getter
        return table is not None and table.closed


def as_our_shutdown(exc: BaseException) -> BaseException:
    """The standard library's own ShutDown (3.13+, raised by its put/get) as ackqueue's."""
    if _StdShutDown is not None and isinstance(exc, _StdShutDown) and not isinstance(exc, ShutDown):
        return ShutDown(str(exc) or "the queue was shut down")
    return exc


def check_timeout(block: bool, timeout: float | None) -> None:
    """The standard library's rule for a blocking call's timeout."""
    if block and timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


def calling_stdlib(calls: Calls, op: str, undo: Callable[[], None]) -> _CallingStdlib:
    """Run the standard library's ``put`` or ``get`` (``op``) for this thread.

    While it runs, ``_qsize`` knows which one is asking (a closed or shut-down queue lets each
    through to the hook that raises). If it fails, ``undo`` gives back what our hook had already
    taken or staged, and the standard library's own ShutDown comes out as ackqueue's.
    """
    return _CallingStdlib(calls, op, undo)


class _CallingStdlib:
    # A class, not a generator context manager: it runs twice per item (each put and each
    # get), and contextlib's machinery cost a microsecond more each time.
    __slots__ = ("_calls", "_op", "_undo")

    def __init__(self, calls: Calls, op: str, undo: Callable[[], None]) -> None:
        self._calls, self._op, self._undo = calls, op, undo

    def __enter__(self) -> None:
        self._calls.op = self._op

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is not None:
                self._undo()
                ours = as_our_shutdown(exc)
                if ours is not exc:
                    raise ours from None
        finally:
            self._calls.op = None


@dataclass(frozen=True)
class Core:
    signals: Signals  # the lock and conditions
    life: Lifecycle  # open, shut down, drained, paused
    tasks: Tasks  # the join() count
    book: Book  # the stored queue
    supply: Supply  # what can be handed out
    mode: Mode  # single-process or shared
    meter: Meter  # counts and timings
    calls: Calls  # what one thread's stdlib put or get carries to the hooks
    clock: Clock  # the queue's time
