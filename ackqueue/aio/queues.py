"""The asyncio queues: :class:`AsyncAckQueue`, :class:`AsyncLifoAckQueue` and
:class:`AsyncPriorityAckQueue`.

Each opens the sync queue of its kind (:attr:`AsyncAckQueue.sync`, which threads of the same
process may use at the same time) and offers its API awaited. Calls that commit run on the
queue's threads (:mod:`.running`); waits for items hold no thread (:mod:`.waiting`). Keyword
arguments go to the sync methods as they are, so every option of theirs works awaited too.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

from ackqueue.aio.binding import plain_with_refused, running_loop
from ackqueue.aio.consumer import AsyncConsumer
from ackqueue.aio.running import Runner, current_lane, shielded
from ackqueue.aio.transactions import AsyncTransaction
from ackqueue.aio.waiting import take_when_ready
from ackqueue.delivery.holds import Delivery
from ackqueue.errors import Empty, Full
from ackqueue.queue.queues import (
    AckQueue,
    LifoAckQueue,
    PriorityAckQueue,
    join_unless,
    ready_listeners,
    takes_commit_nothing,
)

T = TypeVar("T")

THREADS = 8  # threads that commit for one async queue (their commits group in the store)


class AsyncAckQueue(Generic[T]):
    """An ``AckQueue`` for asyncio: ``await q.put(item)``, ``await q.get()``,
    ``async with q.connect() as c:`` ... ``await c.ack(item)``.

    The constructor takes what :class:`~ackqueue.AckQueue` takes (``path``, ``maxsize``,
    ``shared=True`` and every option), plus ``threads``: how many threads commit for it.
    It may be made outside a running loop; its objects that wait (consumers, transactions)
    belong to the loop and task that made them. Every other public method of
    :class:`~ackqueue.AckQueue` is here too, awaited (``await q.metrics()``,
    ``await q.dead_letters()``, ``await q.pause()``, ...).
    """

    _sync_class: ClassVar[type[AckQueue[Any]]] = AckQueue

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        maxsize: int = 0,
        *,
        threads: int = THREADS,
        **options: Any,
    ) -> None:
        runner = Runner(threads, str(options.get("name", "default")))
        try:
            sync: AckQueue[T] = self._sync_class(path, maxsize, **options)
        except BaseException:
            runner.close()
            raise
        self.sync = sync
        """The sync queue underneath: for threads (never blocking calls on the loop's)."""
        self._runner = runner
        self._listeners = listeners = ready_listeners(sync)
        listeners.loops += 1
        # A take that commits nothing may run on the loop's own thread: it only touches memory.
        self._take_on_loop = takes_commit_nothing(sync)

    # -- putting -------------------------------------------------------------------------------

    async def put(self, item: T, **options: Any) -> bool | None:
        """Put ``item``; returns once it is durable. Options and result as for
        ``AckQueue.put`` (``priority``, ``delay``, ``group``, ``key`` ...).

        Cancelled while it waits for room (``maxsize``), it stores nothing. Once its commit
        has started it finishes: the put returns, and the cancellation is delivered when the
        task next waits (a timeout that fell meanwhile returns the put's result). So a put
        that returned is stored, and one that raised ``CancelledError`` or a timeout is not.
        """
        result: bool | None = await self._put(self.sync.put, item, **options)
        return result

    async def put_many(self, items: Iterable[T], **options: Any) -> list[bool] | None:
        """Put every item in one commit; returns once all are durable (or none is stored)."""
        result: list[bool] | None = await self._put(self.sync.put_many, list(items), **options)
        return result

    async def _put(self, method: Callable[..., Any], *args: Any, **options: Any) -> Any:
        running_loop("put()")
        if self.sync.maxsize <= 0:
            # A put is a commit (or, in a transaction, staged for one): it finishes and
            # returns.
            committed: Any = await _finish_despite_cancel(
                self._runner.start(method, *args, **options), undone=()
            )
            return committed
        # A put may wait for room. Cancelled while it waits, it stops waiting and stores
        # nothing (asyncio.wait_for(q.put(x), 5) is how a put gets a timeout, and the caller
        # then puts again; a transaction cancelled so rolls back); one already committing
        # finishes, as a get does.
        abandoned = threading.Event()

        def put() -> Any:
            return _put_unless_abandoned(method, args, options, abandoned)

        if current_lane() is None:
            # Not on one of the queue's own threads, which the acks that make room need.
            waiting = asyncio.get_running_loop().run_in_executor(None, put)
        else:
            waiting = self._runner.start(put)  # the transaction's own thread
        result: Any = await _finish_despite_cancel(
            waiting, on_cancel=abandoned.set, undone=(_Abandoned, Full)
        )
        return result

    # -- getting -------------------------------------------------------------------------------

    async def get(self, timeout: float | None = None) -> T:
        """Remove and return the next item, waiting (without a thread) until one is ready or
        ``Empty`` after ``timeout`` seconds. The removal is durable when this returns.

        Cancelled while it waits, it takes nothing. Once the removal is committing it cannot
        be undone: the get then finishes and returns the item, and the cancellation is
        delivered when the task next waits (an at-most-once item is never dropped unseen): a
        task whose last step this get was ends with the item as its result, and a timeout
        (``asyncio.wait_for``, ``asyncio.timeout``) that fell meanwhile returns the item.
        """
        running_loop("get()")
        sync = self.sync

        async def attempt() -> T:
            if not sync.qsize() and not sync.closed and not sync.is_shutdown:
                raise Empty  # nothing ready: no thread needed to learn that
            return await _finish_despite_cancel(self._runner.start(sync.get, False))

        return await take_when_ready(self._listeners, attempt, timeout)

    async def get_nowait(self) -> T:
        """``await get(timeout=0)``: the next ready item, or ``Empty`` at once."""
        return await self.get(timeout=0)

    def connect(self, *, takes_on_threads: bool = False) -> AsyncConsumer[T]:
        """A consumer for the calling task: what it gets is held until acked, and goes back
        when it is closed or the task ends. ``async with q.connect() as c:``

        ``takes_on_threads``: take items on the queue's threads even where a take only
        touches memory, so that reading items from the file (a backlog) leaves the loop free
        for other tasks meanwhile; a batch consumer (``get_many``) gains, a single ``get``
        pays a thread hop.
        """
        on_loop = self._take_on_loop and not takes_on_threads
        return AsyncConsumer(self.sync, self._runner, self._listeners, on_loop)

    def transaction(self) -> AsyncTransaction:
        """``async with q.transaction():`` commits the block's queue operations together."""
        return AsyncTransaction(self.sync.transaction, self._runner)

    # -- what it holds: memory only, so not awaited ---------------------------------------

    def qsize(self) -> int:
        """How many items are ready now (``AckQueue.qsize``); reads memory, not awaited."""
        return self.sync.qsize()

    def empty(self) -> bool:
        """True when a get without waiting would find nothing (``AckQueue.empty``); not
        awaited."""
        return self.sync.empty()

    def full(self) -> bool:
        """True when a put without waiting would raise ``Full`` (``AckQueue.full``); not
        awaited."""
        return self.sync.full()

    def unacked_count(self) -> int:
        """How many items this process's consumers hold (``AckQueue.unacked_count``)."""
        return self.sync.unacked_count()

    def delayed_count(self) -> int:
        """How many items wait for a delay to pass (``AckQueue.delayed_count``)."""
        return self.sync.delayed_count()

    def held(self) -> list[tuple[str, Delivery, float]]:
        """Every item this process holds, as ``(owner, delivery, age)``; the owner names the
        consumer's task (``AckQueue.held``)."""
        return self.sync.held()

    def task_done(self) -> None:
        """Mark one plain ``get`` done for ``join`` (``queue.Queue.task_done``); an ack does it
        by itself."""
        self.sync.task_done()

    @property
    def name(self) -> str:
        """The queue's name in its database (``name=``, default ``"default"``)."""
        return self.sync.name

    @property
    def maxsize(self) -> int:
        """The ``maxsize`` the queue was opened with (0: unbounded)."""
        return self.sync.maxsize

    @property
    def max_attempts(self) -> int | None:
        """Deliveries after which an unacked item goes to the dead letters (``None``: no limit)."""
        return self.sync.max_attempts

    @property
    def ack_timeout(self) -> float | None:
        """Seconds an item may stay held before it goes back (``None``: no limit)."""
        return self.sync.ack_timeout

    @property
    def shared(self) -> bool:
        """True when the queue runs in shared mode (holds stored; other processes use it)."""
        return self.sync.shared

    @property
    def paused(self) -> bool:
        """True while the queue hands nothing out (``pause()``, stored: every process sees it)."""
        return self.sync.paused

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self.sync.closed

    # -- the rest, awaited ---------------------------------------------------------------------

    async def join(self) -> None:
        """Wait until every item put has been acked (or ``task_done``), as
        ``AckQueue.join`` (:class:`~ackqueue.QueueClosedError` if the queue closes while items
        are not done). Cancelled, it leaves no thread waiting."""
        running_loop("join()")
        loop = asyncio.get_running_loop()
        give_up = threading.Event()
        # A thread of the loop's, not one of ours (the acks that finish the items need them);
        # it waits in slices, so that a cancelled join lets it go.
        waiting = loop.run_in_executor(None, lambda: join_unless(self.sync, give_up))
        try:
            await shielded(waiting)
        except asyncio.CancelledError:
            give_up.set()
            raise

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Every other public method of the sync queue (``metrics``, ``dead_letters``,
        ``requeue_dead``, ``pause``, ``shutdown``, ``remove``, ...), awaited: it runs on one
        of the queue's threads with its arguments passed on as they are."""
        if name.startswith("_") or name == "sync":
            raise AttributeError(name)
        method = getattr(self.sync, name)
        if not callable(method):
            raise AttributeError(name)

        async def forwarded(*args: Any, **kwargs: Any) -> Any:
            running_loop(f"{name}()")
            return await self._runner.run(method, *args, **kwargs)

        forwarded.__name__ = name
        forwarded.__doc__ = method.__doc__
        return forwarded

    # -- closing -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Give back what consumers hold and close the queue (and its threads)."""
        await asyncio.get_running_loop().run_in_executor(None, self.close_now)

    def close_now(self) -> None:
        """:meth:`aclose` for code outside a running loop (it blocks)."""
        if self.sync.closed:
            return
        self.sync.close()
        self._runner.close()
        self._listeners.loops -= 1

    async def __aenter__(self) -> AsyncAckQueue[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> NoReturn:
        plain_with_refused(f"an {type(self).__name__}", f"{type(self).__name__}(...) as q:")

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises (a ``with`` needs both to call it)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {self.sync!r}>"


async def _finish_despite_cancel(
    future: asyncio.Future[T],
    on_cancel: Callable[[], None] | None = None,
    undone: tuple[type[BaseException], ...] = (Empty,),
) -> T:
    """A plain get's removal, or a put, once started, is not undone: see
    :meth:`AsyncAckQueue.get`. A cancellation calls ``on_cancel`` (which asks the call to stop
    waiting) and waits for the call's end: if it ended by one of ``undone`` (it did nothing)
    the cancellation is raised, else its result is returned and the cancellation delivered
    at the task's next await."""
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(future)
            break
        except asyncio.CancelledError:
            if not future.done():
                cancelled = True
                if on_cancel is not None:
                    on_cancel()
                continue
            if future.cancelled() or future.exception() is not None:
                raise
            cancelled = True
            result = future.result()
            break
        except undone:
            if cancelled:
                raise asyncio.CancelledError from None
            raise
    if cancelled:
        task = asyncio.current_task()
        if task is not None:
            _cancel_later(task)
    return result


def _cancel_later(task: asyncio.Task[Any]) -> None:
    """Hand a cancellation that arrived while a get or put committed back to ``task`` when it
    next waits: not at once, since a task whose coroutine ends now would end cancelled and
    throw away its result (the item, or the put's answer: ``create_task(q.get())``, ``gather``,
    ``wait_for`` on Python 3.11); not if the task has ended by then, nor if the canceller took
    its request back (a timeout that expired, ``asyncio.timeout`` or ``wait_for`` on 3.12,
    sees the result and returns it)."""
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+, as uncancel
    uncancel = getattr(task, "uncancel", None)

    def deliver() -> None:
        if task.done() or (cancelling is not None and not cancelling()):
            return
        if uncancel is not None:
            uncancel()  # the request stands once, as it was made
        task.cancel()

    asyncio.get_running_loop().call_soon(deliver)


class _Abandoned(Exception):
    """A put's caller was cancelled while the put waited for room: it stored nothing."""


# A put waiting for room in a bounded queue waits in slices this long, so that a cancelled
# put stops waiting within one.
ROOM_SLICE = 0.05


def _put_unless_abandoned(
    method: Callable[..., Any],
    args: tuple[Any, ...],
    options: dict[str, Any],
    abandoned: threading.Event,
) -> Any:
    """``method(*args, **options)``, a put on a bounded queue run on a thread, waiting for room
    in slices of :data:`ROOM_SLICE` (its ``block`` and ``timeout`` kept); :class:`_Abandoned`,
    nothing stored, once ``abandoned`` is set while it waits."""
    options = dict(options)
    block = options.pop("block", True)
    timeout = options.pop("timeout", None)
    if not block or (timeout is not None and timeout < 0):
        return method(*args, block=block, timeout=timeout, **options)  # waits for nothing
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if abandoned.is_set():
            raise _Abandoned
        left = ROOM_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return method(*args, block=True, timeout=min(left, ROOM_SLICE), **options)
        except Full:
            if deadline is not None and time.monotonic() >= deadline:
                raise


class AsyncLifoAckQueue(AsyncAckQueue[T]):
    """Like ``LifoAckQueue``: the most recently put item is delivered first."""

    _sync_class = LifoAckQueue


class AsyncPriorityAckQueue(AsyncAckQueue[T]):
    """Like ``PriorityAckQueue``: the smallest item first (equal items in put order)."""

    _sync_class = PriorityAckQueue
