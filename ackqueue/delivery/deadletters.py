"""Dead letters: items taken out of delivery, kept with why, to be listed, requeued or purged.

An item becomes a dead letter when a consumer rejects it, when it was delivered
``max_attempts`` times without an ack, or when it can no longer be unpickled. Each queue keeps
its own dead letters in its stored record, numbered by an id that is never reused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ackqueue.base.interrupts import Shield
from ackqueue.delivery.claims import Staged, unpickle_item
from ackqueue.errors import ItemLoadError
from ackqueue.records import DeadRecord, Entry, QueueRecord
from ackqueue.storage.counts import count_change


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter as :meth:`AckQueue.dead_letters` lists it.

    ``when`` and ``put_at`` are epoch seconds (from the queue's clock); ``attempts`` counts
    the deliveries the item had. ``item`` is an :class:`UnloadableItem` when the item cannot
    be unpickled.
    """

    id: int
    item: Any
    attempts: int
    reason: str
    when: float
    put_at: float


@dataclass(frozen=True)
class UnloadableItem:
    """Stands in for a dead item whose pickle cannot be loaded (its class is gone)."""

    data: bytes
    error: str


def bury(record: QueueRecord, key: Any, reason: str, when: float, attempts: int | None) -> int:
    """Move entry ``key`` to the dead letters (inside a change); return its dead-letter id.

    ``attempts`` None keeps the stored count.
    """
    entry = record.entries[key]  # first, so a missing key changes nothing
    dead = record.dead_tree()
    record.dead_next += 1
    dead_id = record.dead_next
    count = entry.attempts if attempts is None else attempts
    dead[dead_id] = DeadRecord(key, entry.data, entry.put_at, count, reason, when)
    record.dead_length.change(1)
    del record.entries[key]
    count_change(record, -1)
    if record.delayed is not None and key in record.delayed:
        del record.delayed[key]
    return dead_id


class DeadLetterMixin:
    """The dead-letter half of :class:`AckQueue`'s public API."""

    def dead_letters(self: Any) -> list[DeadLetter]:
        """Every dead letter of this queue, oldest first."""
        with self.mutex:
            self._check_open()

            def read() -> list[DeadLetter]:
                dead = self._reader_rec.dead
                stored = list(dead.items()) if dead is not None else []
                return [_listed(dead_id, rec) for dead_id, rec in stored]

            return self._read_current(read)

    def dead_count(self: Any) -> int:
        """How many dead letters this queue keeps."""
        with self.mutex:
            self._check_open()

            def read() -> int:
                length = self._reader_rec.dead_length
                return length() if length is not None else 0

            return self._read_current(read)

    def requeue_dead(self: Any, ids: Iterable[int] | None = None) -> int:
        """Put dead letters back at the end of the queue with a fresh attempt count.

        ``ids`` chooses which (see :attr:`DeadLetter.id`); None means all. Unknown ids are
        skipped. Returns how many were requeued, in one commit.
        """
        with Shield(interruptible=False):  # stored and ready in memory, or neither
            return self._requeue_dead(ids)

    def _requeue_dead(self: Any, ids: Iterable[int] | None) -> int:
        with self.mutex:
            self._check_can_put()
            wanted = None if ids is None else list(ids)

            def read() -> list[tuple[int, Any]]:
                dead = self._reader_rec.dead
                if dead is None:
                    return []
                chosen = list(dead.keys()) if wanted is None else [i for i in wanted if i in dead]
                return [(dead_id, dead[dead_id].key) for dead_id in dict.fromkeys(chosen)]

            fresh: dict[int, Staged] = {}
            for dead_id, old_key in self._read_current(read):
                seq = self._alloc_seq()
                fresh[dead_id] = Staged(self._rekey(old_key, seq), seq, b"")
        record = self._wrec

        def requeue() -> list[Staged]:
            moved = []
            for dead_id, staged in fresh.items():
                letter = record.dead.get(dead_id)
                if letter is None:
                    continue
                del record.dead[dead_id]
                record.dead_length.change(-1)
                record.entries[staged.key] = Entry(letter.data, letter.put_at)
                count_change(record, 1)
                record.reserve_seq(staged.seq)
                moved.append(staged)
            return moved

        moved = self._store.run(requeue) if fresh else []
        with self.mutex:
            self.unfinished_tasks += len(moved)
            for staged in moved:
                self._offer_locked(staged.key)
        return len(moved)

    def purge_dead(self: Any, ids: Iterable[int] | None = None) -> int:
        """Delete dead letters for good (all when ``ids`` is None); return how many, in one
        commit."""
        self._check_open()
        record = self._wrec
        wanted = None if ids is None else list(ids)

        def purge() -> int:
            dead = record.dead
            if dead is None:
                return 0
            if wanted is None:
                doomed = list(dead.keys())
            else:
                doomed = [i for i in dict.fromkeys(wanted) if i in dead]
            for dead_id in doomed:
                del dead[dead_id]
            record.dead_length.change(-len(doomed))
            return len(doomed)

        return self._store.run(purge)


def _listed(dead_id: int, rec: DeadRecord) -> DeadLetter:
    try:
        item = unpickle_item(rec.data, f"dead letter {dead_id}")
    except ItemLoadError as exc:
        item = UnloadableItem(rec.data, str(exc))
    return DeadLetter(dead_id, item, rec.attempts, rec.reason, rec.when, rec.put_at)
