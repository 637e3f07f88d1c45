"""Takes that ride in an ack's commit: in shared mode, a consumer's ack also takes its next item.

In shared mode a get commits a hold and an ack commits again: two commits through the server
per item, and the server commits one at a time. A consumer working in a loop (get, ack, get,
...) gets again right after it acks, so its ack takes the next ready items for it in the same
commit (as many as it acked), and the next ``get``/``get_many`` returns them without a commit.
The ack still returns only once it is durable; it never waits for an item (nothing ready: it
commits alone).

A ride is taken only for a consumer that came back for more within :data:`RIDE_SECONDS` of its
previous ack, and what it took waits for that consumer at most that long: then it is given
back, in its place, as a released hold. A get that finds a ride older than that (its timer
did not run: this process was stopped, maybe past its session lease, and the holds may have
been reaped and the items acked elsewhere) gives it back too instead of handing it out. A
consumer closed meanwhile gives it back at once; another consumer of this process whose get
finds nothing ready takes it over. Only in shared
mode without ``max_attempts`` (a ride counts a delivery, which an unused ride would waste), and
not with a manual clock (whose time moves only when a test moves it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ackqueue.base.clock import Clock
from ackqueue.base.timers import Timer, Timers
from ackqueue.delivery.conditions import Lifecycle, Signals
from ackqueue.delivery.holds import HoldTable
from ackqueue.delivery.mode import ClaimReady, NextId, Ride
from ackqueue.delivery.supply import Claim, Supply

log = logging.getLogger("ackqueue")

RIDE_SECONDS = 0.2


@dataclass(eq=False)
class _Waiting:
    claims: list[Claim]
    timer: Timer | None = None
    landed_at: float = 0.0  # time.monotonic() when the ack that took them committed


class AckRides:
    """The rides of one queue's consumers in this process (every ``*_locked`` method runs
    with the queue's mutex held)."""

    def __init__(
        self,
        signals: Signals,
        life: Lifecycle,
        supply: Supply,
        clock: Clock,
        timers: Timers,
        claim_ready: ClaimReady,
        next_id: NextId,
        ride: Callable[[list[Claim]], Ride],
    ) -> None:
        self._signals, self._life, self._supply = signals, life, supply
        self._clock, self._timers = clock, timers
        self._claim_ready, self._next_id, self._ride = claim_ready, next_id, ride
        self._waiting: dict[HoldTable, _Waiting] = {}
        self._acked_at: dict[HoldTable, float] = {}  # a table's last ack, until its next get
        self._loops: set[HoldTable] = set()  # tables that got again within RIDE_SECONDS

    # -- on the ack's side ---------------------------------------------------------------------

    def board(self, table: HoldTable, n: int) -> Ride | None:
        """Before an ack of ``n`` holds commits: the ride that takes the next ready items for
        ``table`` in the ack's commit, or None. Never raises: the ack must not fail for it."""
        try:
            return self._board(table, n)
        except Exception as exc:  # the server is away (reading what is ready): ack alone
            log.debug("ackqueue: no ride with this ack: %s", exc)
            return None

    def _board(self, table: HoldTable, n: int) -> Ride | None:
        with self._signals.mutex:
            self._acked_at[table] = time.monotonic()
            if table.closed or table in self._waiting or table not in self._loops:
                return None
            if not len(self._supply) or self._life.paused:
                return None
        claims = self._claim_ready(n)
        if not claims:
            return None
        for claim in claims:
            claim.delivery_id = self._next_id()
        return self._ride(claims)

    def landed(self, table: HoldTable, ride: Ride) -> None:
        """The ack committed, and the ride with it: keep what it took for ``table``."""
        kept = ride.landed().kept
        if not kept:
            return
        with self._signals.mutex:
            if table.closed or table in self._waiting:
                for claim in kept:
                    self._supply.make_ready_locked(claim.key)
                return
            waiting = self._waiting[table] = _Waiting(kept, landed_at=time.monotonic())
            waiting.timer = self._timers.at(
                self._clock() + RIDE_SECONDS, lambda: self._expire_locked(table, waiting)
            )

    # -- on the get's side ---------------------------------------------------------------------

    def take_for(self, table: HoldTable, n: int) -> list[Claim]:
        """Up to ``n`` items taken for ``table`` by its last ack (or, if nothing else is ready,
        by another consumer's): held already, to be handed out without a commit."""
        with self._signals.mutex:
            acked_at = self._acked_at.pop(table, None)
            if acked_at is not None and time.monotonic() - acked_at <= RIDE_SECONDS:
                self._loops.add(table)
            else:
                self._loops.discard(table)
            if self._life.paused or self._life.drained:
                return []  # handed out by nobody now; it goes back when its wait runs out
            source = table if table in self._waiting else None
            if source is None and self._waiting and not len(self._supply):
                source = next(iter(self._waiting))
            if source is None:
                return []
            waiting = self._waiting[source]
            if time.monotonic() - waiting.landed_at > RIDE_SECONDS:
                # Its wait ran out without its timer running: this process was stopped (or
                # starved) meanwhile, maybe past its session lease, and then these holds were
                # reaped and the items given to, and acked by, another process. Fenced like a
                # late ack: give them back (fenced by their tokens) and take afresh.
                self._give_back_locked(source, waiting)
                return []
            claims, waiting.claims = waiting.claims[:n], waiting.claims[n:]
            if not waiting.claims:
                self._end_locked(source)
            return claims

    # -- giving back ---------------------------------------------------------------------------

    def drop_locked(self, table: HoldTable) -> None:
        """``table``'s consumer went away: give back what was taken for it."""
        self._acked_at.pop(table, None)
        self._loops.discard(table)
        waiting = self._waiting.get(table)
        if waiting is not None:
            self._give_back_locked(table, waiting)

    def _expire_locked(self, table: HoldTable, waiting: _Waiting) -> None:
        if self._waiting.get(table) is waiting:
            waiting.timer = None
            self._give_back_locked(table, waiting)

    def _give_back_locked(self, table: HoldTable, waiting: _Waiting) -> None:
        self._end_locked(table)
        for claim in waiting.claims:
            self._supply.make_ready_locked(claim.key)  # a held key: released by the session
        self._signals.not_empty.notify_all()

    def _end_locked(self, table: HoldTable) -> None:
        waiting = self._waiting.pop(table)
        if waiting.timer is not None:
            self._timers.cancel(waiting.timer)
            waiting.timer = None
