"""Holds: what each consumer holds, the holds of every consumer with their leases, and giving
them back when their holder goes away.

A :class:`HoldTable` is what one consumer holds: delivered items awaiting their ack, found by
identity or by id. :class:`Holds` keeps the set of tables and the count of held items, gives a
table's holds back to the supply when its consumer goes away, and runs the leases of
``ack_timeout``: a hold whose deadline passes is taken back and its item is ready again in its
place; the late holder is fenced (its ack raises :class:`~ackqueue.LeaseExpiredError` and
changes nothing). Holds being settled right now are never taken back; if that settling fails,
the lease is checked again at once. Every ``*_locked`` method runs with the queue's mutex held.

Three ways a holder goes away, each handled here or by storage layout:

* its consumer is closed, or garbage-collected while still holding items;
* the thread that connected it ends, normally or by an exception: a sentinel kept in a
  ``threading.local`` is freed when the thread's state is torn down, and its finalizer hands
  the holds back at once, with no polling and no call on the queue needed
  (:class:`ThreadExitWatch`);
* the process dies: in one process holds are never written to the database, so everything
  still stored is ready again the next time the queue is opened (shared mode: see
  :mod:`ackqueue.shared.sessions`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ackqueue.base.timers import Timers
from ackqueue.delivery.supply import Claim, Supply
from ackqueue.errors import LeaseExpiredError

log = logging.getLogger("ackqueue")


class Holds:
    def __init__(
        self, supply: Supply, timers: Timers, name: str, ack_timeout: float | None
    ) -> None:
        self._supply = supply
        self._timers = timers  # (its clock is the one leases run on)
        self._name = name
        self.ack_timeout = ack_timeout
        self.tables: set[HoldTable] = set()
        self.count = 0
        self._delivery_ids = itertools.count(1)

    def new_table(self, task: str | None = None) -> HoldTable:
        """A table owned by the calling thread, or by the asyncio task named ``task``."""
        table = HoldTable() if task is None else HoldTable(owner=task, owner_kind="task")
        self.tables.add(table)
        return table

    def next_delivery_id(self) -> int:
        """A delivery id never handed out before (itertools.count is safe without the mutex)."""
        return next(self._delivery_ids)

    def add_locked(self, table: HoldTable, claims: list[Claim]) -> list[Hold]:
        """Hold each claim for ``table`` (with a lease if ``ack_timeout`` is set)."""
        holds = []
        now = time.time()
        for claim in claims:
            delivery_id = claim.delivery_id or self.next_delivery_id()
            hold = table.add(claim.key, Delivery(delivery_id, claim.item, claim.attempts, now))
            holds.append(hold)
            if self.ack_timeout is not None:
                self.arm_lease_locked(table, hold, self.ack_timeout)
        self.count += len(holds)
        return holds

    def drop_locked(self, table: HoldTable, hold: Hold) -> bool:
        """Forget a settled hold; False if it was no longer in its table."""
        if table.by_id.get(hold.delivery.id) is not hold:
            return False
        table.remove(hold)
        if hold.lease_timer is not None:
            self.end_lease_locked(hold)
        self.count -= 1
        self._supply.released_locked(hold.key)
        return True

    def forget_if_done_locked(self, table: HoldTable) -> None:
        if table.closed and not table.by_id:
            self.tables.discard(table)

    def give_back_locked(self, table: HoldTable, holds: Iterable[Hold]) -> None:
        """Undo holds (a rolled-back transaction): ready again, unless being settled."""
        for hold in holds:
            if not hold.settling and self.drop_locked(table, hold):
                self._supply.make_ready_locked(hold.key)

    def release_locked(self, table: HoldTable, because: str | None = None) -> None:
        """The consumer went away: close its table and give back what it held."""
        if because is not None and not table.closed:
            table.closed_because = because
        table.closed = True
        returned = table.take_all_unsettled()
        for hold in returned:
            self.end_lease_locked(hold)
            self._supply.make_ready_locked(hold.key)
        self.count -= len(returned)
        self.forget_if_done_locked(table)

    def void_locked(self, voided: Callable[[Any], bool]) -> None:
        """Holds whose key ``voided`` names are void (shared mode: our session lapsed): take
        them away as a lease would, without making them ready here."""
        for table in list(self.tables):
            for hold in list(table.by_id.values()):
                if voided(hold.key) and not hold.settling:
                    hold.voided = True  # taken back with the session: its lease, not ack_timeout
                    self._void_hold_locked(table, hold)

    def lost_locked(self, table: HoldTable, holds: list[Hold]) -> None:
        """A settle of ``holds`` failed because the store says they are no longer ours (their
        session was reaped, the item acked elsewhere): void them, as :meth:`void_locked` would
        have had they not been settling, instead of keeping them held for good."""
        for hold in holds:
            hold.settling = False
            if table.by_id.get(hold.delivery.id) is hold:
                self._void_hold_locked(table, hold)
        self.forget_if_done_locked(table)

    def _void_hold_locked(self, table: HoldTable, hold: Hold) -> None:
        table.remove(hold)
        table.expired.append(hold)
        self.end_lease_locked(hold)
        self.count -= 1
        self._supply.released_locked(hold.key)

    def drain_locked(self) -> int:
        """Close every table and forget what it held (an immediate shutdown); return how many."""
        drained = 0
        for table in list(self.tables):
            if not table.closed:
                table.closed_because = "the queue was shut down (immediate=True)"
            table.closed = True
            taken = table.take_all_unsettled()
            for hold in taken:
                self.end_lease_locked(hold)
            drained += len(taken)
            self.forget_if_done_locked(table)
        self.count -= drained
        return drained

    def holder_of_locked(self, item: Any, besides: HoldTable) -> str | None:
        """Who holds this very object in another table (``thread 'x'``), if anyone."""
        for table in self.tables:
            if table is not besides and table.find(item) is not None:
                return table.holder
        return None

    def listing_locked(self) -> list[tuple[str, Delivery, float]]:
        return [(t.owner, d, age) for t in self.tables for d, age in t.ages()]

    def snapshot_locked(self) -> list[dict[str, Any]]:
        """Every hold as the status file shows it."""
        return [
            {
                "owner": table.owner,
                "id": hold.delivery.id,
                "attempts": hold.delivery.attempts,
                "got_at": hold.delivery.got_at,
                "key": repr(hold.key),
            }
            for table in self.tables
            for hold in table.by_id.values()
        ]

    # -- leases ----------------------------------------------------------------------------

    def arm_lease_locked(self, table: HoldTable, hold: Hold, seconds: float) -> None:
        """Give ``hold`` a lease of ``seconds`` from now."""
        deadline = self._timers.monotonic() + seconds
        hold.deadline = deadline
        if hold.lease_timer is not None:
            self._timers.cancel(hold.lease_timer)
        hold.lease_timer = self._timers.at(deadline, self._lease_callback(table, hold, deadline))

    def end_lease_locked(self, hold: Hold) -> None:
        """The hold is settled or given back: its deadline no longer matters."""
        if hold.lease_timer is not None:
            self._timers.cancel(hold.lease_timer)
            hold.lease_timer = None

    def _lease_callback(self, table: HoldTable, hold: Hold, deadline: float) -> Callable[[], None]:
        def run_out() -> None:
            self._lease_ran_out_locked(table, hold, deadline)

        return run_out

    def _lease_ran_out_locked(self, table: HoldTable, hold: Hold, deadline: float) -> None:
        if hold.deadline != deadline or hold.settling:
            return  # extended since, or being settled
        if table.by_id.get(hold.delivery.id) is not hold:
            return  # settled or given back already
        hold.lease_timer = None
        table.remove(hold)
        table.expired.append(hold)
        self.count -= 1
        self._supply.make_ready_locked(hold.key)
        log.info(
            "lease of delivery %d in queue %r ran out: the item is ready again",
            hold.delivery.id,
            self._name,
        )

    def expire_overdue_locked(self, table: HoldTable, holds: list[Hold]) -> None:
        now = self._timers.monotonic()
        for hold in holds:
            if hold.deadline is not None and hold.deadline <= now:
                self._lease_ran_out_locked(table, hold, hold.deadline)

    def extend_locked(self, table: HoldTable, hold: Hold, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("a lease must be extended by a positive number of seconds")
        if table.by_id.get(hold.delivery.id) is not hold:
            raise LeaseExpiredError(
                "extend(): the lease ran out before it was extended; the item went back "
                "to the queue"
            )
        self.arm_lease_locked(table, hold, seconds)


@dataclass(frozen=True)
class Delivery:
    """One hand-out of an item to a consumer.

    ``id`` names this delivery for :meth:`Consumer.ack_id`; ``attempts`` counts the deliveries
    of the item so far, this one included; ``got_at`` is a ``time.time()`` stamp.
    """

    id: int
    item: Any
    attempts: int
    got_at: float


@dataclass(eq=False)
class Hold:
    key: Any
    delivery: Delivery
    settling: bool = False
    deadline: float | None = None  # when the lease runs out (ack_timeout), monotonic seconds
    voided: bool = False  # taken back because this process lost its session (shared mode)
    lease_timer: Any = None  # the timers entry of that deadline, cancelled when settled


# Holds taken back by a lease are remembered, so the late holder's ack can say what happened.
EXPIRED_MEMORY = 1024


@dataclass(eq=False)
class HoldTable:
    """The holds of one consumer. Guarded by its queue's mutex."""

    owner: str = field(default_factory=lambda: threading.current_thread().name)
    owner_kind: str = "thread"  # or "task": an AsyncConsumer's holds are its task's

    @property
    def holder(self) -> str:
        """Who holds this table's items, as messages say it: ``thread 'worker-1'``."""
        return f"{self.owner_kind} {self.owner!r}"
    watched: set[int] = field(default_factory=set)  # threads whose end closes it
    by_id: dict[int, Hold] = field(default_factory=dict)
    by_object: dict[int, list[Hold]] = field(default_factory=dict)
    closed: bool = False
    closed_because: str = "it was closed"  # why, for the error of a later call
    expired: deque[Hold] = field(default_factory=lambda: deque(maxlen=EXPIRED_MEMORY))

    def add(self, key: Any, delivery: Delivery) -> Hold:
        hold = Hold(key, delivery)
        self.by_id[delivery.id] = hold
        self.by_object.setdefault(id(delivery.item), []).append(hold)
        return hold

    def find(self, item: Any) -> Hold | None:
        """The oldest unsettled hold of this very object."""
        for hold in self.by_object.get(id(item), ()):
            if not hold.settling:
                return hold
        return None

    def remove(self, hold: Hold) -> None:
        del self.by_id[hold.delivery.id]
        same = self.by_object[id(hold.delivery.item)]
        same.remove(hold)
        if not same:
            del self.by_object[id(hold.delivery.item)]

    def find_expired(self, item: Any) -> Hold | None:
        """A hold of this very object that its lease took back, forgotten once reported."""
        for hold in self.expired:
            if hold.delivery.item is item:
                self.expired.remove(hold)
                return hold
        return None

    def take_all_unsettled(self) -> list[Hold]:
        """Remove and return every hold not being settled right now."""
        taken = [hold for hold in self.by_id.values() if not hold.settling]
        for hold in taken:
            self.remove(hold)
        return taken

    def ages(self) -> list[tuple[Delivery, float]]:
        now = time.time()
        return [(h.delivery, now - h.delivery.got_at) for h in self.by_id.values()]


Release = Callable[[HoldTable, str], None]  # (table, name of the thread that ended)


class _ThreadSentinel:
    """Lives exactly as long as the thread that created it."""

    def __init__(self) -> None:
        self.tables: list[HoldTable] = []


def _release_all(
    release_ref: weakref.ReferenceType[Release], tables: list[HoldTable], thread: str
) -> None:
    release = release_ref()
    if release is not None:
        for table in tables:
            release(table, thread)


class ThreadExitWatch:
    """Calls ``release(table, thread name)`` for each watched table when a thread that
    watches it ends."""

    def __init__(self, release: Release) -> None:
        # A weak reference to a bound method: the watch must not keep its queue alive.
        self._release = weakref.WeakMethod(release)
        self._local = threading.local()

    def watch(self, table: HoldTable) -> None:
        """Watch ``table`` on behalf of the calling thread."""
        sentinel = getattr(self._local, "sentinel", None)
        if sentinel is None:
            sentinel = self._local.sentinel = _ThreadSentinel()
            thread = threading.current_thread().name
            weakref.finalize(sentinel, _release_all, self._release, sentinel.tables, thread)
        sentinel.tables[:] = [t for t in sentinel.tables if not t.closed]
        sentinel.tables.append(table)
