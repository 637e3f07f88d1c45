"""Single-process mode: this process owns the queue's database (a file or memory).

Holds live only in memory, so a crash gives everything back by itself: the next open finds
every unacked entry still stored. Deliveries are counted in memory, or durably before the
item is handed out when ``max_attempts`` is set (a delivery that kills the process still
counts). Sequence numbers count on from the block reserved in the record at open.
"""

from __future__ import annotations

import threading
from typing import Any

from ackqueue.base.clock import Clock
from ackqueue.base.timers import Timers
from ackqueue.delivery.groups import Grouping, GroupRules
from ackqueue.delivery.holds import Hold
from ackqueue.delivery.mode import (
    ClaimReady,
    Edit,
    Load,
    NextId,
    NoRides,
    Taken,
    Void,
    exhausted_reason,
)
from ackqueue.delivery.ordering import Ordering, checked_seq
from ackqueue.delivery.supply import Claim, Supply
from ackqueue.records import SEQ_MASK, QueueRecord
from ackqueue.storage.book import Book, Keeping, sweep_done
from ackqueue.storage.counts import settle
from ackqueue.storage.transactions import current


class OneWriter:
    """How a book is kept when one process writes it: the count is kept in transaction
    metadata (see :mod:`ackqueue.storage.counts`) and an acked entry is deleted at once.
    Entries that shared-mode acks only marked done are deleted at open: nobody else sweeps.
    New entries are inline in their tree buckets: nobody else marks them."""

    own_records = False

    def opened(self, book: Book, record: QueueRecord) -> None:
        store = book.store
        if store.counts is not None:
            store.counts.start(record, book.name)
        else:
            settle(record, store.db.storage)
        if record.done_marks:
            store.note_dropped(sweep_done(record, None))
            record.done_marks = False

    def retire(self, book: Book, key: Any) -> None:
        book.remove_entry(key)


class HeldInMemory:
    """Holds that live only in this process's memory: no other process sees them, so nothing
    is fenced, nothing deferred, and a crash gives everything back by itself (the next open
    finds every unacked entry still stored)."""

    def fence(self, holds: list[Hold], edit: Edit | None, check: Edit) -> tuple[Edit | None, Edit]:
        return edit, check

    def settled_locked(self, keys: list[Any]) -> None:
        pass

    def check_extend(self, hold: Hold) -> None:
        pass

    def may_be_void(self, taken_at: float) -> bool:
        return False  # holds live in memory: only their own lease ends them

    def confirm(self) -> None:
        pass

    def on_session_lost(self, void: Void) -> None:
        pass

    def flush(self) -> None:
        pass

    def dropped(self) -> Edit | None:
        return None  # the stored entries are ready for the next opener

    def close(self) -> None:
        pass


IN_MEMORY = HeldInMemory()


class LocalMode:
    keeping: Keeping = OneWriter()

    def __init__(
        self,
        book: Book,
        ordering: Ordering,
        mutex: threading.Lock,
        clock: Clock,
        max_attempts: int | None,
        rules: GroupRules | None = None,
    ) -> None:
        self._book = book
        self._store = book.store
        self._order = ordering
        self._mutex = mutex
        self._clock = clock
        self._max_attempts = max_attempts
        self._next_seq = book.seq_reserved()
        self._attempts: dict[Any, int] = {}  # deliveries this session, without max_attempts
        self._grouping = Grouping(rules or GroupRules(), ordering.key_id, clock)

    @property
    def shared(self) -> bool:
        return False

    def next_seq_locked(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq if seq <= SEQ_MASK else checked_seq(seq, self._book.name)

    @property
    def takes_commit_nothing(self) -> bool:
        return self._max_attempts is None  # else a delivery is counted durably first

    @property
    def entries_stay_as_put(self) -> bool:
        return True  # a revisit here withdraws the entry first, dropping its kept pickle

    @property
    def stored_holds(self) -> HeldInMemory:
        return IN_MEMORY

    @property
    def indexing(self) -> Grouping:
        return self._grouping

    def remove_group(self, group: str, supply: Supply) -> int:
        with self._mutex:
            taken = supply.take_group_locked(group)
        if not taken:
            return 0
        keys = [key for key, _due in taken]
        try:
            self._store.run(self._book.deleter(keys, done=False))  # frees their keys
        except BaseException:
            with self._mutex:
                for key, due in taken:
                    supply.land_locked(key, due)
            raise
        with self._mutex:
            supply.removed_locked(keys)
        return len(keys)

    def load(self, key: Any, load: Load) -> tuple[bytes, int]:
        return load(key)

    def rides(
        self, supply: Supply, timers: Timers, claim_ready: ClaimReady, next_id: NextId
    ) -> NoRides:
        return NoRides()

    def take(self, claims: list[Claim], supply: Supply) -> Taken:
        if self._max_attempts is None:
            with self._mutex:
                for claim in claims:
                    key_id = self._order.key_id(claim.key)
                    n = self._attempts.get(key_id, 0) + 1
                    self._attempts[key_id] = n
                    claim.attempts += n
            return Taken(kept=claims)
        record = self._book.attempt_recorder(
            [c.key for c in claims], self._max_attempts, exhausted_reason(self._max_attempts),
            self._clock,
        )
        try:
            counts = self._store.run(record)
        except BaseException:
            with self._mutex:
                for claim in claims:
                    supply.make_ready_locked(claim.key)
            raise
        taken = Taken()
        for claim, count in zip(claims, counts, strict=True):
            if count is None:
                taken.buried.append(claim)
            else:
                claim.attempts = count
                taken.kept.append(claim)
        return taken

    def take_away(self, claim: Claim, supply: Supply) -> Taken:
        key = claim.key
        tx = current(self._store)

        def unclaim() -> None:
            with self._mutex:
                supply.make_ready_locked(key)

        def forget() -> None:
            with self._mutex:
                self.forget_locked(key)
                supply.gone_locked(key)

        if tx is not None:
            tx.add(
                self._book.deleter([key]),
                check=self._book.require_stored([key]),
                after_commit=forget,
                undo=unclaim,
            )
            return Taken(kept=[claim])
        try:
            self._store.run(self._book.deleter([key], check=True))
        except BaseException:
            unclaim()
            raise
        forget()
        return Taken(kept=[claim])

    def refund_locked(self, key: Any) -> None:
        key_id = self._order.key_id(key)
        n = self._attempts.get(key_id, 0)
        if n > 1:
            self._attempts[key_id] = n - 1
        else:
            self._attempts.pop(key_id, None)

    def forget_locked(self, key: Any) -> None:
        self._attempts.pop(self._order.key_id(key), None)
