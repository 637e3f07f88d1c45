"""Leases (``ack_timeout``): a held item whose holder takes too long goes back to the queue.

A hung thread never dies, so thread-death recovery cannot free what it holds; a lease can.
Each hold taken with ``ack_timeout`` set gets a deadline on the queue's timer thread. When it
passes, the hold is taken back and the item is ready again, in its original place. The late
holder is fenced: its ack or nack raises :class:`~ackqueue.LeaseExpiredError` and changes
nothing. Holds being acked right now are never taken back; if that ack fails, the lease is
checked again at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ackqueue.delivery.holds import Hold, HoldTable
from ackqueue.errors import LeaseExpiredError

log = logging.getLogger("ackqueue")


class LeaseMixin:
    def _arm_lease(self: Any, table: HoldTable, hold: Hold, seconds: float) -> None:
        """Give ``hold`` a lease of ``seconds`` from now (the caller holds the mutex)."""
        deadline = self._clock() + seconds
        hold.deadline = deadline
        if hold.lease_timer is not None:
            self._timers.cancel(hold.lease_timer)
        hold.lease_timer = self._timers.at(deadline, self._lease_callback(table, hold, deadline))

    def _end_lease_locked(self: Any, hold: Hold) -> None:
        """The hold is settled or given back: its deadline no longer matters."""
        if hold.lease_timer is not None:
            self._timers.cancel(hold.lease_timer)
            hold.lease_timer = None

    def _lease_callback(
        self: Any, table: HoldTable, hold: Hold, deadline: float
    ) -> Callable[[], None]:
        def run_out() -> None:
            self._lease_ran_out_locked(table, hold, deadline)

        return run_out

    def _lease_ran_out_locked(self: Any, table: HoldTable, hold: Hold, deadline: float) -> None:
        if hold.deadline != deadline or hold.settling:
            return  # extended since, or being settled
        if table.by_id.get(hold.delivery.id) is not hold:
            return  # settled or given back already
        hold.lease_timer = None
        table.remove(hold)
        table.expired.append(hold)
        self._held -= 1
        self._make_ready_locked(hold.key)
        log.info(
            "lease of delivery %d in queue %r ran out: the item is ready again",
            hold.delivery.id,
            self.name,
        )

    def _expire_overdue_locked(self: Any, table: HoldTable, holds: list[Hold]) -> None:
        now = self._clock()
        for hold in holds:
            if hold.deadline is not None and hold.deadline <= now:
                self._lease_ran_out_locked(table, hold, hold.deadline)

    def _extend(self: Any, table: HoldTable, hold: Hold, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError("a lease must be extended by a positive number of seconds")
        with self.mutex:
            if table.by_id.get(hold.delivery.id) is not hold:
                raise LeaseExpiredError(
                    "extend(): the lease ran out before it was extended; the item went back "
                    "to the queue"
                )
            self._arm_lease(table, hold, seconds)
