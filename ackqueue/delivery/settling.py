"""Handing items to consumers and settling them: holds, attempts, ack, nack, reject.

A consumer get claims the next ready item, counts the delivery (durably, before the item is
handed out, when ``max_attempts`` is set) and records a hold. Settling a hold is a plan of
stored edits (delete for ack, dead-letter for reject or when attempts ran out, a new due time
for a delayed nack) and in-memory effects applied once the edits are committed, or at the end
of the caller's transaction. A rollback or failed commit undoes the in-memory marks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ackqueue.base.interrupts import Shield
from ackqueue.delivery.claims import Claim
from ackqueue.delivery.deadletters import bury
from ackqueue.delivery.holds import Delivery, Hold, HoldTable
from ackqueue.errors import ItemLoadError, QueueClosedError
from ackqueue.storage.transactions import current


class DeliveryMixin:
    def _hold_next(self: Any, table: HoldTable, block: bool, timeout: float | None) -> Any:
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            # A fresh shield per round: after a round whose items all went to the dead
            # letters, the wait for the next one is interruptible again.
            with Shield():
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                claims = self._count_attempts([self._claim_next(block, remaining, table)])
                if claims:
                    return self._hold(table, claims)[0]

    def _count_attempts(self: Any, claims: list[Claim]) -> list[Claim]:
        """Count this delivery of each claim; drop (dead-letter) those out of attempts.

        With ``max_attempts`` the count is committed before the items are handed out, so a
        delivery that kills the process still counts. Without it, counting stays in memory.
        """
        if self.max_attempts is None:
            with self.mutex:
                for claim in claims:
                    key_id = self._key_id(claim.key)
                    n = self._session_attempts.get(key_id, 0) + 1
                    self._session_attempts[key_id] = n
                    claim.attempts += n
            return claims
        try:
            counts = self._store.run(self._attempt_recorder([c.key for c in claims]))
        except BaseException:
            with self.mutex:
                for claim in claims:
                    self._unclaim_locked(claim.key)
            raise
        kept = []
        with self.mutex:
            for claim, count in zip(claims, counts, strict=True):
                if count is None:
                    self._forget_locked(claim.key, finished=1)
                else:
                    claim.attempts = count
                    kept.append(claim)
        return kept

    def _hold(self: Any, table: HoldTable, claims: list[Claim]) -> list[Any]:
        holds = []
        with self.mutex:
            if table.closed:
                for claim in claims:
                    self._unclaim_locked(claim.key)
                if self.is_shutdown:
                    raise self._shut_down_error()
                raise QueueClosedError("this consumer is closed")
            now = time.time()
            for claim in claims:
                delivery_id = claim.delivery_id or next(self._delivery_ids)
                delivery = Delivery(delivery_id, claim.item, claim.attempts, now)
                hold = table.add(claim.key, delivery)
                holds.append(hold)
                if self.ack_timeout is not None:
                    self._arm_lease(table, hold, self.ack_timeout)
            self._held += len(holds)
        tx = current(self._store)
        if tx is not None:
            tx.add(undo=lambda: self._give_back(table, holds))
        return [claim.item for claim in claims]

    def _settle(
        self: Any,
        table: HoldTable,
        holds: list[Hold],
        outcome: str,
        *,
        delay: float | None = None,
        reason: str | None = None,
    ) -> None:
        """Settle holds already marked ``settling``: ``ack``, ``nack`` or ``reject`` them."""
        now = self._clock()
        due = now + delay if delay else 0.0
        plan = [(hold, self._action(hold, outcome, due)) for hold in holds]
        edit, check = self._settlement(plan, due, reason, now)

        def finish() -> None:
            self._finish_settle(table, plan, due)

        def undo() -> None:
            self._unsettle(table, holds)

        tx = current(self._store)
        if tx is not None:
            tx.add(edit, check=check, after_commit=finish, undo=undo)
            return
        if edit is not None:
            try:
                self._store.run(lambda: (check(), edit()))
            except BaseException:
                undo()
                raise
        finish()

    def _settlement(
        self: Any, plan: list[tuple[Hold, str]], due: float, reason: str | None, now: float
    ) -> tuple[Callable[[], None] | None, Callable[[], None]]:
        """The stored edit of a settlement (None if it stores nothing) and its check."""
        stored = [hold.key for hold, action in plan if action != "return"]
        edit = self._settlement_edit(plan, due, reason, now) if stored else None
        return edit, self._require_stored(stored)

    def _action(self: Any, hold: Hold, outcome: str, due: float) -> str:
        if outcome == "ack":
            return "delete"
        if outcome == "reject":
            return "bury"
        if self.max_attempts is not None and hold.delivery.attempts >= self.max_attempts:
            return "exhausted"
        return "delay" if due else "return"

    def _settlement_edit(
        self: Any, plan: list[tuple[Hold, str]], due: float, reason: str | None, now: float
    ) -> Callable[[], None]:
        record = self._wrec

        def edit() -> None:
            for hold, action in plan:
                if action == "delete":
                    self._remove_entry(record, hold.key)
                elif action == "bury":
                    bury(record, hold.key, reason or "rejected", now, hold.delivery.attempts)
                elif action == "exhausted":
                    bury(record, hold.key, self._exhausted_reason(), now, hold.delivery.attempts)
                elif action == "delay":
                    record.entries[hold.key].not_before = due
                    record.delay_index()[hold.key] = due

        return edit

    def _finish_settle(
        self: Any, table: HoldTable, plan: list[tuple[Hold, str]], due: float
    ) -> None:
        with self.mutex:
            finished = 0
            for hold, action in plan:
                if table.by_id.get(hold.delivery.id) is hold:
                    table.remove(hold)
                    self._end_lease_locked(hold)
                    self._held -= 1
                if action == "return":
                    self._make_ready_locked(hold.key)
                elif action == "delay":
                    self._land_key_locked(hold.key, due)
                else:
                    self._forget_locked(hold.key)
                    finished += 1
            self._task_finished_locked(finished)
            if table.closed and not table.by_id:
                self._tables.discard(table)

    def _unsettle(self: Any, table: HoldTable, holds: list[Hold]) -> None:
        with self.mutex:
            for hold in holds:
                hold.settling = False
            if table.closed:
                self._release_locked(table)
            else:
                self._expire_overdue_locked(table, holds)

    def _give_back(self: Any, table: HoldTable, holds: list[Hold]) -> None:
        """Undo holds taken inside a rolled-back transaction."""
        with self.mutex:
            for hold in holds:
                if table.by_id.get(hold.delivery.id) is hold and not hold.settling:
                    table.remove(hold)
                    self._end_lease_locked(hold)
                    self._held -= 1
                    self._make_ready_locked(hold.key)

    def _bury_unloadable(self: Any, exc: ItemLoadError) -> ItemLoadError:
        """Move the item that could not be loaded to the dead letters, so the head moves on."""
        key, _ = self._tls.unloadable
        self._tls.unloadable = None
        record, now = self._wrec, self._clock()

        def edit() -> None:
            bury(record, key, str(exc), now, None)

        try:
            self._store.run(edit)
        except BaseException:
            self._unclaim(key)
            raise
        with self.mutex:
            self._forget_locked(key)
            self._task_finished_locked(1)
        return ItemLoadError(f"{exc}; it was moved to the dead letters")

    def _attempt_recorder(self: Any, keys: list[Any]) -> Callable[[], list[int | None]]:
        record, limit, reason = self._wrec, self.max_attempts, self._exhausted_reason()

        def record_attempts() -> list[int | None]:
            counts: list[int | None] = []
            now = self._clock()
            for key in keys:
                entry = record.entries[key]
                if limit is not None and entry.attempts >= limit:
                    bury(record, key, reason, now, entry.attempts)
                    counts.append(None)
                else:
                    entry.attempts += 1
                    counts.append(entry.attempts)
            return counts

        return record_attempts

    def _exhausted_reason(self: Any) -> str:
        return f"delivered {self.max_attempts} times without an ack (max_attempts)"

    # -- giving holds back when their holder goes away (see recovery.py) ---------------

    def _release_table(self: Any, table: HoldTable) -> None:
        with self.mutex:
            self._release_locked(table)

    def _close_table(self: Any, table: HoldTable) -> None:
        """Close a consumer: give back its holds and wake any get blocked on it, which raises."""
        with self.mutex:
            self._release_locked(table)
            self.not_empty.notify_all()
            self._landed.notify_all()

    def _release_table_from_finalizer(self: Any, table: HoldTable) -> None:
        """Give back a garbage-collected consumer's holds without waiting for the mutex here.

        The cyclic collector runs finalizers inside whatever allocation triggers it, also in a
        thread that holds this queue's mutex (not reentrant): waiting for it would deadlock.
        When the mutex is busy, a short-lived thread waits for it instead.
        """
        if self.mutex.acquire(blocking=False):
            try:
                self._release_locked(table)
            finally:
                self.mutex.release()
            return
        # At interpreter shutdown no thread can start; holds are not stored, so none is needed.
        with contextlib.suppress(RuntimeError):
            threading.Thread(
                target=self._release_table, args=(table,), name="ackqueue-release", daemon=True
            ).start()

    def _release_locked(self: Any, table: HoldTable) -> None:
        table.closed = True
        returned = table.take_all_unsettled()
        for hold in returned:
            self._end_lease_locked(hold)
            self._make_ready_locked(hold.key)
        self._held -= len(returned)
        if not table.by_id:
            self._tables.discard(table)
