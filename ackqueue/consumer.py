"""The consumer proxy that :meth:`AckQueue.connect` returns (one per thread)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .errors import NotHeldError, QueueClosedError
from .holds import Delivery, Hold, HoldTable
from .interrupts import Shield

if TYPE_CHECKING:
    from .queue import AckQueue


class Consumer:
    """Gets items from a queue and holds them until :meth:`ack` or :meth:`nack`.

    What it holds goes back to the queue, in its original place, when the consumer is closed
    (also by leaving ``with q.connect() as c:``), when the thread that connected it ends, and,
    if the process dies, when the queue is next opened.
    """

    def __init__(self, queue: AckQueue, table: HoldTable) -> None:
        self._queue = queue
        self._table = table
        self._finalizer = weakref.finalize(self, queue._release_table, table)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The next item, held for this consumer; blocks like ``queue.Queue.get``."""
        self._check_open()
        return self._queue._hold_next(self._table, block, timeout)

    def get_nowait(self) -> Any:
        return self.get(block=False)

    # Settling runs under a closed Shield: Ctrl-C waits until memory and file agree again.

    def ack(self, item: Any) -> None:
        """Remove the held ``item`` (the very object :meth:`get` returned) for good."""
        with Shield(interruptible=False):
            hold = self._begin_settle(self._find(item, "ack"))
            self._queue._settle(self._table, hold, ack=True)

    def nack(self, item: Any) -> None:
        """Give the held ``item`` back to the queue, in its original place."""
        with Shield(interruptible=False):
            hold = self._begin_settle(self._find(item, "nack"))
            self._queue._settle(self._table, hold, ack=False)

    def ack_id(self, delivery_id: int) -> None:
        """Like :meth:`ack`, naming the delivery by its id (see :meth:`delivery`)."""
        with Shield(interruptible=False):
            hold = self._begin_settle(self._find_id(delivery_id, "ack_id"))
            self._queue._settle(self._table, hold, ack=True)

    def nack_id(self, delivery_id: int) -> None:
        with Shield(interruptible=False):
            hold = self._begin_settle(self._find_id(delivery_id, "nack_id"))
            self._queue._settle(self._table, hold, ack=False)

    def delivery(self, item: Any) -> Delivery:
        """The delivery of a held item: its id, attempts so far and when it was got."""
        return self._find(item, "delivery").delivery

    def deliveries(self) -> list[Delivery]:
        """Everything this consumer holds, oldest first."""
        with self._queue.mutex:
            return [hold.delivery for hold in self._table.by_id.values()]

    def close(self) -> None:
        """Give back everything held; the consumer cannot be used afterwards."""
        with Shield(interruptible=False):
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._table.closed

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"holding {len(self._table.by_id)}"
        return f"<Consumer of {self._queue.name!r} for thread {self._table.owner!r}: {state}>"

    # -- finding holds ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._table.closed:
            raise QueueClosedError("this consumer is closed")

    def _find(self, item: Any, verb: str) -> Hold:
        with self._queue.mutex:
            hold = self._table.find(item)
        if hold is None:
            raise NotHeldError(f"{verb}(): {self._not_held_reason(item)}")
        return hold

    def _find_id(self, delivery_id: int, verb: str) -> Hold:
        with self._queue.mutex:
            hold = self._table.by_id.get(delivery_id)
        if hold is None or hold.settling:
            raise NotHeldError(
                f"{verb}(): this consumer holds no delivery {delivery_id!r} (never got, already "
                "acked or nacked, held by another consumer, or given back when it was closed)"
            )
        return hold

    def _begin_settle(self, hold: Hold) -> Hold:
        with self._queue.mutex:
            if hold.settling or hold.delivery.id not in self._table.by_id:
                raise NotHeldError("that delivery is already being acked or nacked")
            hold.settling = True
        return hold

    def _not_held_reason(self, item: Any) -> str:
        for owner, delivery, _age in self._queue.held():
            if delivery.item is item:
                return f"that item is held by another consumer (thread {owner!r}), not this one"
        if self._table.closed:
            return "this consumer is closed; what it held was given back"
        return (
            f"this consumer does not hold that {type(item).__qualname__} (never got from it, "
            "already acked or nacked, or not the very object get() returned)"
        )
