"""The holds of every consumer of one queue: who holds what, how many, and their leases.

Each consumer has a :class:`~ackqueue.delivery.holds.HoldTable`; this object keeps the set of
them and the count of held items, gives a table's holds back to the supply when its consumer
goes away, and runs the leases of ``ack_timeout``: a hold whose deadline passes is taken back
and its item is ready again in its place; the late holder is fenced (its ack raises
:class:`~ackqueue.LeaseExpiredError` and changes nothing). Holds being settled right now are
never taken back; if that settling fails, the lease is checked again at once.

Every ``*_locked`` method runs with the queue's mutex held.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ackqueue.base.clock import Clock
from ackqueue.base.timers import Timers
from ackqueue.delivery.claims import Claim
from ackqueue.delivery.holds import Delivery, Hold, HoldTable
from ackqueue.delivery.supply import Supply
from ackqueue.errors import LeaseExpiredError

log = logging.getLogger("ackqueue")


class Holds:
    def __init__(
        self, supply: Supply, timers: Timers, clock: Clock, name: str, ack_timeout: float | None
    ) -> None:
        self._supply = supply
        self._timers = timers
        self._clock = clock
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
        deadline = self._clock() + seconds
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
        now = self._clock()
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
