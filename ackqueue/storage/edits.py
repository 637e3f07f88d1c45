"""The stored edits of the queue: functions run inside ``Store.run`` that touch only the
database, so that a group commit may apply them again after a conflict. Each checks what it
needs before it changes anything, because a failing change is committed with its batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ackqueue.delivery.claims import Staged
from ackqueue.errors import AckQueueError, NotAQueueFileError
from ackqueue.records import Entry, QueueRecord, queues_of
from ackqueue.storage.counts import count_change, settle


class StoredEditsMixin:
    def _find_or_create_record(self: Any) -> QueueRecord:
        root = self._store.root()
        queues = queues_of(root, create=False)
        if queues is None and self._store.owns_db and len(root):
            raise NotAQueueFileError(
                f"{self._store.where} holds a ZODB database that is not an ackqueue file "
                f"(its root has {sorted(root)[:5]!r})"
            )
        queues = queues_of(root, create=True)
        record = queues.get(self.name)
        if record is None:
            record = queues[self.name] = QueueRecord(self._kind)
        elif record.kind != self._kind:
            raise NotAQueueFileError(
                f"queue {self.name!r} in {self._store.where} was made by a {record.kind} queue "
                f"class, not {type(self).__name__}"
            )
        counts = self._store.counts
        if counts is not None and getattr(self, "_defer_count", False):
            counts.start(record, self.name)  # see counts.py
        else:
            settle(record, self._store.db.storage)
        return record

    # -- stored edits (run inside Store.run; they touch only the database) --------------------

    def _inserter(self: Any, batch: list[Staged]) -> Callable[[], None]:
        record, now = self._wrec, self._clock()

        def insert() -> None:
            for staged in batch:
                record.entries[staged.key] = Entry(staged.data, now, staged.not_before)
                if staged.not_before:
                    record.delay_index()[staged.key] = staged.not_before
            count_change(record, len(batch))
            record.reserve_seq(max(staged.seq for staged in batch))

        return insert

    def _deleter(self: Any, keys: list[Any], check: bool = False) -> Callable[[], None]:
        record = self._wrec
        require = self._require_stored(keys)

        def delete() -> None:
            if check:
                require()
            for key in keys:
                self._remove_entry(record, key)

        return delete

    def _require_stored(self: Any, keys: list[Any]) -> Callable[[], None]:
        record = self._wrec  # its attributes are read inside the change, by the committer

        def require() -> None:
            entries = record.entries
            for key in keys:
                if key not in entries:
                    raise AckQueueError(f"entry {key!r} of queue {self.name!r} is not stored")

        return require

    def _remove_entry(self: Any, record: QueueRecord, key: Any) -> None:
        del record.entries[key]
        count_change(record, -1)
        self._store.note_dropped(1)  # the entry's own record is garbage now
        if record.delayed is not None and key in record.delayed:
            del record.delayed[key]
