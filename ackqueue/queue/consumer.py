"""The consumer proxy that :meth:`AckQueue.connect` returns (one per thread)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from ackqueue.base.interrupts import Shield
from ackqueue.delivery.groups import checked_seconds
from ackqueue.delivery.holds import Delivery, Hold, HoldTable
from ackqueue.errors import LeaseExpiredError, NotHeldError, QueueClosedError
from ackqueue.queue.deliveries import Deliveries, Outcome
from ackqueue.storage.items import pickle_item
from ackqueue.storage.transactions import Transaction, transaction

T = TypeVar("T")
_KEEP: Any = object()  # nack(replace=) not given: None is an item like any other


class Consumer(Generic[T]):
    """Gets items from a queue and holds them until :meth:`ack` or :meth:`nack`.

    What it holds goes back to the queue, in its original place, when the consumer is closed
    (also by leaving ``with q.connect() as c:``), when the thread that connected it ends, and,
    if the process dies, when the queue is next opened.
    """

    def __init__(self, deliveries: Deliveries, table: HoldTable) -> None:
        self._deliveries = deliveries
        self._mutex = deliveries.signals.mutex
        self._table = table
        # Collected without close(): release from the finalizer, which must never block.
        self._finalizer = weakref.finalize(
            self, deliveries.release_table_from_finalizer, table
        )

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """The next item, held for this consumer; blocks like ``queue.Queue.get``.

        Any thread may get with it; see :meth:`_check_getter` for what that means.
        """
        self._check_getter()
        item: T = self._deliveries.hold_next(self._table, block, timeout)
        return item

    def get_nowait(self) -> T:
        """``get(block=False)``: the next ready item, held, or ``Empty`` at once."""
        self._check_getter()
        item: T = self._deliveries.hold_next(self._table, False, None)
        return item

    def get_many(self, n: int, timeout: float | None = None, *, block: bool = True) -> list[T]:
        """Between 1 and ``n`` items, held for this consumer.

        Waits like :meth:`get` for the first item, then takes what else is ready right now.
        """
        self._check_getter()
        items: list[T] = self._deliveries.hold_many(self._table, n, block, timeout)
        return items

    # Settling (and extend, and close) runs under a closed Shield: from marking a hold as
    # being settled to the end of its commit, Ctrl-C waits, so memory and file agree again.

    def ack(self, item: Any) -> None:
        """Remove the held ``item`` (the very object :meth:`get` returned) for good."""
        with Shield(interruptible=False):
            self._deliveries.settle(self._table, [self._find(item, "ack")], "ack")

    def ack_many(self, items: Iterable[Any]) -> None:
        """Ack every item in one commit; if one is not held, raise and ack none."""
        items = list(items)  # a caller's generator runs before the shield goes up
        with Shield(interruptible=False):
            with self._mutex:
                holds: list[Hold] = []
                try:
                    for item in items:
                        hold = self._table.find(item)
                        if hold is None:
                            raise NotHeldError(f"ack_many(): {self._not_held_locked(item)}")
                        hold.settling = True
                        holds.append(hold)
                except BaseException:
                    for hold in holds:
                        hold.settling = False
                    raise
            if holds:
                self._deliveries.settle(self._table, holds, "ack")

    def nack(self, item: Any, delay: float | None = None, *, replace: Any = _KEEP) -> None:
        """Give the held ``item`` back to the queue, in its original place.

        With ``delay`` (seconds), it is not delivered again before then (stored, so this
        commits). With ``max_attempts`` reached, it goes to the dead letters instead.
        With ``replace``, the item given back is ``replace`` instead (a retry's new request,
        say), stored in the same commit, keeping its place, its key, its group and its
        delivery count; an unpicklable ``replace`` raises before anything changes.
        """
        if delay is not None and delay < 0:
            raise ValueError(f"delay must not be negative, not {delay!r}")
        data = None if replace is _KEEP else pickle_item(replace)
        with Shield(interruptible=False):
            self._settle([self._find(item, "nack")], "nack", delay=delay, data=data)

    def snooze(self, item: Any, seconds: float) -> None:
        """Give the held ``item`` back for later without spending an attempt: it is not
        delivered again for ``seconds`` (a 429 with Retry-After, say), and neither its delivery
        count nor ``max_attempts`` counts this delivery. Stored, so this commits."""
        seconds = checked_seconds("snooze seconds", seconds)
        with Shield(interruptible=False):
            self._settle([self._find(item, "snooze")], "snooze", delay=seconds)

    def reject(self, item: Any, reason: str | None = None) -> None:
        """Send the held ``item`` straight to the dead letters, with ``reason``."""
        with Shield(interruptible=False):
            self._settle([self._find(item, "reject")], "reject", reason=reason)

    def extend(self, item: Any, seconds: float) -> None:
        """Renew the lease on the held ``item``: it may be held ``seconds`` more from now."""
        with Shield(interruptible=False):  # a lease half re-armed would never run out
            self._deliveries.extend(self._table, self._find(item, "extend", settle=False), seconds)

    def ack_id(self, delivery_id: int) -> None:
        """Like :meth:`ack`, naming the delivery by its id (see :meth:`delivery`)."""
        with Shield(interruptible=False):
            self._settle([self._find_id(delivery_id, "ack_id")], "ack")

    def nack_id(self, delivery_id: int, delay: float | None = None) -> None:
        """Like :meth:`nack`, for the delivery with this id (:attr:`Delivery.id`)."""
        with Shield(interruptible=False):
            self._settle([self._find_id(delivery_id, "nack_id")], "nack", delay=delay)

    def transaction(self) -> AbstractContextManager[Transaction]:
        """``with c.transaction():`` the same as the queue's :meth:`AckQueue.transaction`."""
        return transaction(self._deliveries.store)

    def delivery(self, item: Any) -> Delivery:
        """The delivery of a held item: its id, attempts so far and when it was got."""
        return self._find(item, "delivery", settle=False).delivery

    def deliveries(self) -> list[Delivery]:
        """Everything this consumer holds, oldest first."""
        with self._mutex:
            return [hold.delivery for hold in self._table.by_id.values()]

    def close(self) -> None:
        """Give back everything held; the consumer cannot be used afterwards.

        A get or get_many blocked on this consumer in another thread wakes and raises
        :class:`QueueClosedError`; it takes nothing, so the next item stays ready for others.
        """
        with Shield(interruptible=False):
            self._finalizer.detach()
            self._deliveries.close_table(self._table)

    @property
    def closed(self) -> bool:
        """True once the consumer is closed (by :meth:`close`, or its thread's end)."""
        return self._table.closed

    def __enter__(self) -> Consumer[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"holding {len(self._table.by_id)}"
        return f"<Consumer of {self._deliveries.name!r} for {self._table.holder}: {state}>"

    # -- finding holds ---------------------------------------------------------------------

    def _check_getter(self) -> None:
        """A thread other than the one that connected the consumer may get with it too: from
        then on, the consumer is closed (what it holds goes back) when either thread ends, so
        the thread-death guarantee holds for the getter as well."""
        self._check_open()
        self._deliveries.watch_getter(self._table)

    def _check_open(self) -> None:
        if self._table.closed:
            life = self._deliveries.life
            if life.shut_down:  # closed by an immediate shutdown
                raise life.shut_down_error()
            raise QueueClosedError(
                f"this consumer is closed: {self._table.closed_because}, and what it held went "
                "back to the queue; connect a new consumer (q.connect()) in the thread that gets"
            )

    def _settle(self, holds: list[Hold], outcome: Outcome, **how: Any) -> None:
        self._deliveries.settle(self._table, holds, outcome, **how)

    def _find(self, item: Any, verb: str, settle: bool = True) -> Hold:
        """The hold of ``item``, marked as being settled unless ``settle`` is False."""
        with self._mutex:
            hold = self._table.find(item)
            if hold is None:
                raise NotHeldError(f"{verb}(): {self._not_held_locked(item)}")
            if settle:
                hold.settling = True
        return hold

    def _find_id(self, delivery_id: int, verb: str) -> Hold:
        with self._mutex:
            hold = self._table.by_id.get(delivery_id)
            if hold is None or hold.settling:
                raise NotHeldError(
                    f"{verb}(): this consumer holds no delivery {delivery_id!r} (never got, "
                    "already acked or nacked, held by another consumer, given back when it "
                    "was closed, or taken back when its lease ran out)"
                )
            hold.settling = True
        return hold

    def _not_held_locked(self, item: Any) -> str:
        """Why ``item`` is not held here (with the queue's mutex held)."""
        expired = self._table.find_expired(item)
        if expired is not None:
            lease = (
                "this process's session lease (it was stopped or cut off longer than "
                "session_timeout)"
                if expired.voided
                else f"its lease (ack_timeout={self._deliveries.holds.ack_timeout}s)"
            )
            raise LeaseExpiredError(
                f"this consumer held that {type(item).__qualname__} longer than {lease}; it "
                "went back to the queue and may have been delivered to another consumer, so "
                "nothing was changed"
            )
        owner = self._deliveries.holds.holder_of_locked(item, besides=self._table)
        if owner is not None:
            return f"that item is held by another consumer ({owner}), not this one"
        return self._not_held_reason(item)

    def _not_held_reason(self, item: Any) -> str:
        if self._table.closed:
            why = self._table.closed_because
            return f"this consumer is closed ({why}); what it held was given back"
        return (
            f"this consumer does not hold that {type(item).__qualname__} (never got from it, "
            "already acked or nacked, or not the very object get() returned)"
        )
