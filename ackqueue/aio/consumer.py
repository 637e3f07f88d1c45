"""The async consumer that :meth:`AsyncAckQueue.connect` returns: one per task.

It wraps a sync :class:`~ackqueue.queue.consumer.Consumer` and keeps its promises for tasks:
what it holds goes back to the queue, in its place, when it is closed (``async with``), when
the task that connected it ends (normally, by an exception or cancelled), or, if the process
dies, at the next open. Any task of its loop may get with it while it is open (``wait_for``,
``gather`` and ``ensure_future`` run a get in a task of their own): what is got is held by the
consumer, not by the task that got it, and goes back with the consumer's.

Taking an item only touches memory in a single-process queue without ``max_attempts``: there
it runs on the event loop's thread, between two awaits, so a cancellation can never land
between the take and the hand-over. Elsewhere (``max_attempts`` counts the delivery durably;
shared mode commits the hold) the take runs on a thread, and a task cancelled meanwhile gives
back what the take brought in, in its place. Acks, nacks and the rest commit on a thread
(:mod:`.running`): a cancelled task's ack still finishes, so the item is acked or held, never
lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, NoReturn, TypeVar

from ackqueue.aio.binding import Binding, plain_with_refused
from ackqueue.aio.running import Lane, Runner, current_lane
from ackqueue.aio.transactions import AsyncTransaction
from ackqueue.aio.waiting import take_when_ready
from ackqueue.delivery.conditions import ReadyListeners
from ackqueue.delivery.holds import Delivery
from ackqueue.errors import Empty, NotHeldError, QueueClosedError
from ackqueue.queue.consumer import Consumer
from ackqueue.queue.queues import AckQueue

T = TypeVar("T")
R = TypeVar("R")


class AsyncConsumer(Generic[T]):
    """Gets items for one task and holds them until ``await ack(item)`` or ``nack``.

    What it holds belongs to it and goes back when it is closed or when the task that
    connected it ends. Any task of the same loop may get, ack, nack, reject or extend with it
    meanwhile: tasks that the owner starts (``asyncio.wait_for(c.get(), 5)``,
    ``asyncio.gather(c.get(), c.get())``) get for it.
    Made by :meth:`AsyncAckQueue.connect`. Every other public method of
    :class:`~ackqueue.Consumer` is here too, awaited (``await c.snooze(item, 30)``, ...).
    """

    def __init__(
        self, queue: AckQueue[T], runner: Runner, listeners: ReadyListeners, take_on_loop: bool
    ) -> None:
        self._binding = Binding("this AsyncConsumer")
        self._sync: Consumer[T] = queue.connect(task=self._binding.task.get_name())
        self._queue = queue
        self._runner = runner
        self._listeners = listeners
        self._take_on_loop = take_on_loop
        self._store_transaction = queue.transaction
        self._binding.task.add_done_callback(self._owner_ended)

    # -- taking --------------------------------------------------------------------------------

    async def get(self, timeout: float | None = None) -> T:
        """The next item, held for this consumer; waits (without a thread) until one is ready,
        or raises ``Empty`` after ``timeout`` seconds."""
        self._binding.check_loop()
        sync = self._sync

        def take() -> list[T]:
            return [sync.get(block=False)]

        return (await take_when_ready(self._listeners, lambda: self._take(take), timeout))[0]

    async def get_nowait(self) -> T:
        """``await get(timeout=0)``: the next ready item, held, or ``Empty`` at once."""
        return await self.get(timeout=0)

    async def get_many(self, n: int, timeout: float | None = None) -> list[T]:
        """Between 1 and ``n`` items: waits like :meth:`get` for the first, then takes what
        else is ready at once."""
        self._binding.check_loop()
        if n < 1:
            raise ValueError(f"get_many needs n >= 1, not {n!r}")
        sync = self._sync

        def take() -> list[T]:
            return sync.get_many(n, block=False)

        return await take_when_ready(self._listeners, lambda: self._take(take), timeout)

    async def _take(self, take: Callable[[], list[T]]) -> list[T]:
        if self._take_on_loop and current_lane() is None:
            return take()  # memory only: no await between the take and the hand-over
        queue = self._queue
        if not queue.qsize() and not queue.closed and not queue.is_shutdown:
            raise Empty  # nothing ready: no thread needed to learn that
        lane = current_lane()
        if lane is not None:
            return await self._take_in_transaction(take, lane)
        future = self._runner.start(take)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._give_back_taken)
            raise

    async def _take_in_transaction(self, take: Callable[[], list[T]], lane: Lane) -> list[T]:
        """A take on the transaction's lane. Cancelled, it is given back there, inside the
        transaction, before anything the block does next: the block need not roll back (a
        ``wait_for`` timeout is caught and the block goes on to commit)."""
        lock = threading.Lock()
        taken: list[list[T]] = []  # what the take got, while its task may still want it
        abandoned: list[bool] = []

        def take_unless_abandoned() -> list[T]:
            items = take()
            with lock:
                if not abandoned:
                    taken.append(items)
                    return items
            self._nack_quietly(items)  # its task was cancelled while it ran
            return []

        future = self._runner.start(take_unless_abandoned)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with lock:
                abandoned.append(True)
                items = taken[0] if taken else []
            if items:  # taken, not handed over yet: back, on the lane, before what follows
                lane.executor.submit(self._nack_quietly, items)
            future.add_done_callback(_forget)
            raise

    def _give_back_taken(self, future: asyncio.Future[list[T]]) -> None:
        """A take finished after its task was cancelled: back to the queue, in its place."""
        if future.cancelled() or future.exception() is not None:
            return
        self._runner.submit(self._nack_quietly, future.result())

    def _nack_quietly(self, items: list[T]) -> None:
        for item in items:
            # Given back already if the consumer was closed, or its task ended, meanwhile.
            with contextlib.suppress(NotHeldError, QueueClosedError):
                self._sync.nack(item)

    # -- settling (any task of the loop) -----------------------------------------------------

    async def ack(self, item: Any, **options: Any) -> None:
        """Remove the held ``item`` for good; returns once that is durable."""
        await self._settle(self._sync.ack, item, **options)

    async def ack_many(self, items: Iterable[Any], **options: Any) -> None:
        """Ack every item in one commit; if one is not held, raise and ack none."""
        await self._settle(self._sync.ack_many, list(items), **options)

    async def nack(self, item: Any, delay: float | None = None, **options: Any) -> None:
        """Give the held ``item`` back, in its place (not before ``delay`` seconds)."""
        await self._settle(self._sync.nack, item, delay, **options)

    async def reject(self, item: Any, reason: str | None = None, **options: Any) -> None:
        """Send the held ``item`` to the dead letters, with ``reason``."""
        await self._settle(self._sync.reject, item, reason, **options)

    async def extend(self, item: Any, seconds: float, **options: Any) -> None:
        """Renew the lease on the held ``item``: ``seconds`` more from now."""
        await self._settle(self._sync.extend, item, seconds, **options)

    async def ack_id(self, delivery_id: int) -> None:
        """Like :meth:`ack`, for the delivery with this id (``Delivery.id``)."""
        await self._settle(self._sync.ack_id, delivery_id)

    async def nack_id(self, delivery_id: int, delay: float | None = None) -> None:
        """Like :meth:`nack`, for the delivery with this id (``Delivery.id``)."""
        await self._settle(self._sync.nack_id, delivery_id, delay)

    async def _settle(self, method: Callable[..., Any], *args: Any, **options: Any) -> Any:
        self._binding.check_loop()
        return await self._runner.run(method, *args, **options)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Every other public method of the sync consumer (``snooze``, ...), awaited: it runs
        on a thread, as the acks do, with its arguments passed on as they are."""
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._sync, name)
        if not callable(method):
            raise AttributeError(name)

        async def forwarded(*args: Any, **kwargs: Any) -> Any:
            return await self._settle(method, *args, **kwargs)

        forwarded.__name__ = name
        forwarded.__doc__ = method.__doc__
        return forwarded

    # -- what it holds ---------------------------------------------------------------------

    async def run_with(self, work: Callable[..., R], *args: Any) -> R:
        """``work(consumer, *args)`` on one of the queue's threads, with this consumer's
        blocking self (what each awaited call here runs): for a pool's several steps in one
        hop, such as a transaction of many settlements."""
        result: R = await self._runner.run(work, self._sync, *args)
        return result

    def delivery(self, item: Any) -> Delivery:
        """The delivery of a held item: its id, attempts so far and when it was got."""
        return self._sync.delivery(item)

    def deliveries(self) -> list[Delivery]:
        """The deliveries this consumer holds (reads memory; not awaited)."""
        return self._sync.deliveries()

    def transaction(self) -> AsyncTransaction:
        """``async with c.transaction():`` the block's gets, puts, acks and nacks (on any
        queue of this database) commit together or not at all."""
        return AsyncTransaction(self._store_transaction, self._runner)

    # -- closing -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Give back everything held; the consumer cannot be used afterwards."""
        self._binding.task.remove_done_callback(self._owner_ended)
        await self._runner.run(self._sync.close)

    def _owner_ended(self, task: asyncio.Task[Any]) -> None:
        # On the loop thread, from the task's done callbacks: closing may commit (shared
        # mode), so it runs on a thread.
        if not self._sync.closed:
            self._runner.submit(self._sync.close)

    @property
    def closed(self) -> bool:
        """True once the consumer is closed (by ``close``, or its task's end)."""
        return self._sync.closed

    async def __aenter__(self) -> AsyncConsumer[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __enter__(self) -> NoReturn:
        plain_with_refused("an AsyncConsumer", "q.connect() as c:")

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises (a ``with`` needs both to call it)."""

    def __repr__(self) -> str:
        task = self._binding.task.get_name()
        state = "closed" if self.closed else f"holding {len(self._sync.deliveries())}"
        return f"<AsyncConsumer for task {task!r}: {state}>"


def _forget(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()

