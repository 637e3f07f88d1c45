"""Handing items out and settling them: plain gets, consumer gets, ack, nack, reject, extend.

A consumer get claims the next ready item, lets the mode count the delivery (durably, before
the item is handed out, when ``max_attempts`` is set; in shared mode by committing a hold) and
records a hold. Settling a hold is a plan of stored edits (delete for ack, dead letters for
reject or when attempts ran out, a new due time for a delayed nack) and in-memory effects
applied once the edits are committed, or at the end of the caller's transaction. A rollback or
failed commit undoes the in-memory marks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Literal

from ackqueue.base.interrupts import Shield
from ackqueue.delivery.holds import Hold, Holds, HoldTable, ThreadExitWatch
from ackqueue.delivery.mode import Rides, exhausted_reason
from ackqueue.delivery.supply import Claim
from ackqueue.errors import NotHeldError, QueueClosedError
from ackqueue.queue.claiming import Claimer
from ackqueue.queue.core import Core, check_timeout
from ackqueue.storage.book import Settlement
from ackqueue.storage.transactions import current

Outcome = Literal["ack", "nack", "reject", "snooze"]
# What settling does to one hold: a stored settlement, or "return" (ready again, nothing stored).
Action = Literal["delete", "bury", "delay", "snooze", "rewrite", "return"]


class Deliveries:
    def __init__(
        self,
        core: Core,
        claimer: Claimer,
        holds: Holds,
        max_attempts: int | None,
        rides: Rides,
    ) -> None:
        self._rides = rides
        self.signals, self.life, self._tasks = core.signals, core.life, core.tasks
        self._book, self._supply, self._mode = core.book, core.supply, core.mode
        self._stored = core.mode.stored_holds
        self.meter, self._clock = core.meter, core.clock
        self.store = core.book.store
        self._claimer = claimer
        self.holds = holds
        self._max_attempts = max_attempts
        self._exhausted = exhausted_reason(max_attempts)
        self._thread_watch = ThreadExitWatch(self.release_at_thread_end)

    @property
    def name(self) -> str:
        return self._book.name

    # -- handing out --------------------------------------------------------------------------

    def get_away(self, block: bool, timeout: float | None) -> Any:
        """A plain ``get``: the next item, removed for good (or with the transaction)."""
        check_timeout(block, timeout)
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            claim = self._claimer.claim_next(block, remaining)
            claim.delivery_id = self.holds.next_delivery_id()
            taken = self._mode.take_away(claim, self._supply)
            self._forget_buried(taken.buried)
            if taken.kept:
                return claim.item

    def hold_next(self, table: HoldTable, block: bool, timeout: float | None) -> Any:
        check_timeout(block, timeout)
        ridden = self._rides.take_for(table, 1)
        if ridden and (ridden := self._sound(ridden)):
            return self._hold(table, ridden)[0]
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            # A fresh shield per round: after a round whose items all went to the dead
            # letters, the wait for the next one is interruptible again.
            with Shield():
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                claims = self._take([self._claimer.claim_next(block, remaining, table)])
                if claims:
                    return self._hold(table, claims)[0]

    def hold_many(self, table: HoldTable, n: int, block: bool, timeout: float | None) -> list[Any]:
        """Up to ``n`` items held for ``table``: waits like ``get`` for the first one only."""
        if n < 1:
            raise ValueError(f"get_many needs n >= 1, not {n!r}")
        check_timeout(block, timeout)
        ridden = self._ridden(table, n)
        if ridden:
            with Shield():
                more = self._claimer.claim_ready(n - len(ridden)) if len(ridden) < n else []
                return self._hold(table, ridden + (self._take(more) if more else []))
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            with Shield():  # one per round, as in hold_next
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                claims = [self._claimer.claim_next(block, remaining, table)]
                if n > 1:
                    claims += self._claimer.claim_ready(n - 1)
                kept = self._take(claims)
                dropped = len(claims) - len(kept)
                while dropped and len(kept) < n:  # some went to the dead letters: fill up
                    more = self._claimer.claim_ready(n - len(kept))
                    if not more:
                        break
                    counted = self._take(more)
                    dropped = len(more) - len(counted)
                    kept += counted
                if kept:
                    return self._hold(table, kept)

    def _ridden(self, table: HoldTable, n: int) -> list[Claim]:
        """Items an ack took for ``table`` already (see ackqueue.shared.riding)."""
        return self._sound(self._rides.take_for(table, n))

    def _take(self, claims: list[Claim]) -> list[Claim]:
        """Count this delivery of each claim; drop (dead-letter) those out of attempts."""
        for claim in claims:
            claim.delivery_id = self.holds.next_delivery_id()
        taken = self._mode.take(claims, self._supply)
        self._forget_buried(taken.buried)
        return self._sound(taken.kept)

    def _sound(self, claims: list[Claim]) -> list[Claim]:
        """The claims that may be handed out; the others are given back (fenced by their
        tokens, like a late ack), not handed out.

        In shared mode a hold is only as sound as this process's session since it was
        claimed: if this process was stopped (or cut off) past its session lease anywhere
        between the claim and here (while its hold was committing, or an ack's ride was
        landing), another process may have reaped the hold, got the item and acked it
        meanwhile (issue 21 item 2). Then the session is confirmed (renewed, or taken anew)
        before anything else is claimed, so the next round's holds are sound.
        """
        void = [claim for claim in claims if self._stored.may_be_void(claim.taken_at)]
        if not void:
            return claims
        with self.signals.mutex:
            for claim in void:
                self._supply.make_ready_locked(claim.key)  # our hold, given back fenced
            self.signals.not_empty.notify_all()
        self._stored.confirm()
        given_back = {id(claim) for claim in void}  # by identity: an item need not compare
        return [claim for claim in claims if id(claim) not in given_back]

    def _forget_buried(self, buried: list[Claim]) -> None:
        if buried:
            with self.signals.mutex:
                for claim in buried:
                    self._mode.forget_locked(claim.key)
                    self._supply.gone_locked(claim.key)
                self._tasks.finished_locked(len(buried))
                self.meter.buried_locked(len(buried))

    def _hold(self, table: HoldTable, claims: list[Claim]) -> list[Any]:
        with self.signals.mutex:
            if table.closed:
                for claim in claims:
                    self._supply.make_ready_locked(claim.key)
                if self.life.shut_down:
                    raise self.life.shut_down_error()
                raise QueueClosedError("this consumer is closed")
            holds = self.holds.add_locked(table, claims)
        tx = current(self.store)
        if tx is not None:
            tx.add(undo=lambda: self._give_back(table, holds))
        return [claim.item for claim in claims]

    def _give_back(self, table: HoldTable, holds: list[Hold]) -> None:
        """Undo holds taken inside a rolled-back transaction."""
        with self.signals.mutex:
            self.holds.give_back_locked(table, holds)

    # -- settling -----------------------------------------------------------------------------

    def settle(
        self,
        table: HoldTable,
        holds: list[Hold],
        outcome: Outcome,
        *,
        delay: float | None = None,
        reason: str | None = None,
        data: bytes | None = None,
    ) -> None:
        """Settle holds already marked ``settling``: ``ack``, ``nack`` or ``reject`` them;
        ``data``: a nack's new pickle for the items given back (stored, so it commits)."""
        if self.life.opened_by is not None:
            self.life.check_open()  # the parent's queue, in a child made by fork: says so
        now = self._clock()
        # A snooze of no time is ready at once, as a nack without a delay: nothing in the delay
        # index (shared mode counts what is there as waiting until it is taken).
        due = now + delay if delay else 0.0
        plan = [(hold, self._action(hold, outcome, due)) for hold in holds]
        if data is not None:
            plan = [(hold, "rewrite" if act == "return" else act) for hold, act in plan]
        why = self._reason(outcome, reason)
        stored = [
            (hold.key, action, why, hold.delivery.attempts)
            for hold, action in plan
            if action != "return"
        ]
        edit = self._book.settler(stored, due, now, data) if stored else None
        check = self._book.require_stored([settled[0] for settled in stored])
        edit, check = self._stored.fence(holds, edit, check)

        def finish() -> None:
            self._finish(table, plan, due)

        def undo() -> None:
            self._unsettle(table, holds)

        tx = current(self.store)
        if tx is not None:
            tx.add(edit, check=check, after_commit=finish, undo=undo)
            return
        ride = None
        if outcome == "ack" and edit is not None:
            ride = self._rides.board(table, len(holds))
        if edit is not None:
            stored_edit = edit

            def change() -> None:
                check()
                stored_edit()
                if ride is not None:
                    ride.edit()  # after the ack's own edits: a failed check takes nothing

            try:
                self.store.run(change)
            except BaseException as exc:
                if ride is not None:
                    ride.failed()
                if isinstance(exc, NotHeldError):  # fenced: the store says they are not ours
                    with self.signals.mutex:
                        self.holds.lost_locked(table, holds)
                else:
                    undo()
                raise
            if ride is not None:
                self._rides.landed(table, ride)
        finish()

    def _action(self, hold: Hold, outcome: Outcome, due: float) -> Settlement | Action:
        if outcome == "ack":
            return "delete"
        if outcome == "reject":
            return "bury"
        if outcome == "snooze":
            return "snooze"  # never buried: it spends no attempt
        if self._max_attempts is not None and hold.delivery.attempts >= self._max_attempts:
            return "bury"
        return "delay" if due else "return"

    def _reason(self, outcome: Outcome, reason: str | None) -> str:
        if outcome == "reject":
            return reason or "rejected"
        return self._exhausted  # a nack out of attempts

    def _finish(self, table: HoldTable, plan: list[tuple[Hold, Action]], due: float) -> None:
        with self.signals.mutex:
            self._stored.settled_locked([hold.key for hold, _ in plan])
            finished = 0
            now = time.time()
            for hold, action in plan:
                self.holds.drop_locked(table, hold)
                if action in ("return", "rewrite"):
                    self._supply.make_ready_locked(hold.key)
                    self.meter.nacked_locked()
                elif action == "delay":
                    self._supply.land_locked(hold.key, due)
                    self.meter.nacked_locked()
                elif action == "snooze":
                    self._mode.refund_locked(hold.key)
                    self._supply.land_locked(hold.key, due)
                else:
                    self._mode.forget_locked(hold.key)
                    self._supply.gone_locked(hold.key)
                    finished += 1
                    if action == "delete":
                        self.meter.acked_locked(now - hold.delivery.got_at)
                    else:
                        self.meter.buried_locked()
            self._tasks.finished_locked(finished)
            self.holds.forget_if_done_locked(table)

    def _unsettle(self, table: HoldTable, holds: list[Hold]) -> None:
        with self.signals.mutex:
            for hold in holds:
                hold.settling = False
            if table.closed:
                self.holds.release_locked(table)
            else:
                self.holds.expire_overdue_locked(table, holds)

    def extend(self, table: HoldTable, hold: Hold, seconds: float) -> None:
        with self.signals.mutex:
            self.holds.extend_locked(table, hold, seconds)
        self._stored.check_extend(hold)

    # -- giving holds back when their holder goes away (see ackqueue.delivery.holds) ---------------

    def new_table(self, task: str | None = None) -> HoldTable:
        """A consumer's table for the calling thread, given back when that thread ends;
        named after the asyncio task ``task`` if given (whose end the async consumer watches)."""
        with self.signals.mutex:
            self.life.check_open()
            table = self.holds.new_table(task)
        self.watch_getter(table)
        return table

    def watch_getter(self, table: HoldTable) -> None:
        """Close ``table`` (giving back its holds) when the calling thread ends, too."""
        ident = threading.get_ident()
        if ident not in table.watched:
            table.watched.add(ident)
            self._thread_watch.watch(table)

    def release_table(self, table: HoldTable) -> None:
        with self.signals.mutex:
            self._release_locked(table)

    def _release_locked(self, table: HoldTable, because: str | None = None) -> None:
        """Give back what ``table`` holds, and what an ack took for it (shared.riding)."""
        self._rides.drop_locked(table)
        self.holds.release_locked(table, because=because)

    def release_at_thread_end(self, table: HoldTable, thread: str) -> None:
        """A thread that connected or got with the consumer ended: give back what it held."""
        with self.signals.mutex:
            self._release_locked(table, because=f"its thread {thread!r} ended")

    def close_table(self, table: HoldTable) -> None:
        """Close a consumer: give back its holds and wake any get blocked on it, which raises."""
        if self.life.opened_by is not None:
            # A consumer of the parent's queue in a child made by fork: its holds stay the
            # parent's, and nothing here may reach the parent's storage (its connection's
            # thread is not in this process: a give-back waited on it for ever) or its locks.
            table.closed = True
            return
        with self.signals.mutex:
            self._release_locked(table)
            self.signals.not_empty.notify_all()
            self.signals.landed.notify_all()
        self._stored.flush()  # shared mode: ready for every process when close returns

    def release_table_from_finalizer(self, table: HoldTable) -> None:
        """Give back a garbage-collected consumer's holds without waiting for the mutex here.

        The cyclic collector runs finalizers inside whatever allocation triggers it, also in a
        thread that holds this queue's mutex (not reentrant): waiting for it would deadlock.
        When the mutex is busy, a short-lived thread waits for it instead.
        """
        mutex = self.signals.mutex
        if mutex.acquire(blocking=False):
            try:
                self._release_locked(table)
            finally:
                mutex.release()
            return
        # At interpreter shutdown no thread can start; holds are not stored, so none is needed.
        with contextlib.suppress(RuntimeError):
            threading.Thread(
                target=self.release_table, args=(table,), name="ackqueue-release", daemon=True
            ).start()
