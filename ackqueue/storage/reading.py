"""Reading the stored queue: the reader connection, kept at the latest commit.

Items are loaded, and the backlog of earlier sessions is scanned, through a connection of the
queue's own (the writer belongs to the group committer). All of it runs with the queue's mutex
held, which is what makes that one connection safe to share between threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ZODB.POSException import ReadConflictError

from ackqueue.delivery.prefetch import READ_AHEAD
from ackqueue.delivery.ready import ReadyIndex
from ackqueue.records import Entry

READ_RETRIES = 5
SCAN_AHEAD = 64  # backlog keys read per look at the stored tree (see ready.py)

T = TypeVar("T")


class ReaderMixin:
    def _read_current(self: Any, read: Callable[[], T]) -> T:
        """Run ``read`` on the reader connection, moved up to the latest commit first
        (the caller holds the mutex).

        A reader left at an older snapshot would load old revisions of the tree, and a pack
        removes those ("object deleted, likely by simultaneous pack"); a pack running in
        another thread can still do so between the move and the read, so that is retried.
        """
        for attempt in range(READ_RETRIES):
            commits = self._store.commits
            if commits != self._reader_synced or attempt:
                self._reader_tm.begin()
                self._reader_synced = commits
            try:
                return read()
            except ReadConflictError:
                if attempt == READ_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _load(self: Any, key: Any) -> tuple[bytes, int]:
        """The stored pickle and attempts of ``key``, from the item cache when it has them
        (see prefetch.py), else read, with the next few backlog entries read ahead."""
        known = self._items.take(self._key_seq(key))
        if known is not None:
            return known

        def read() -> tuple[bytes, int]:
            entry: Entry = self._reader_rec.entries[key]
            return entry.data, entry.attempts

        loaded = self._read_current(read)
        cursor = self._ready.cursor
        if cursor is not None and self._is_from_backlog(key):
            self._read_ahead(cursor)
        return loaded

    def _read_ahead(self: Any, cursor: Any) -> None:
        """Keep the next backlog entries after the backlog cursor: undelivered, untouched."""
        try:
            entries = self._reader_rec.entries.items(min=cursor, excludemin=True)
            for n, (later, entry) in enumerate(entries):
                seq = self._key_seq(later)
                if n >= READ_AHEAD or seq in self._items:
                    break
                if self._is_from_backlog(later) and not self._items.add(
                    seq, entry.data, entry.attempts
                ):
                    break
        except ReadConflictError:
            pass  # a pack meanwhile: those entries are read one by one instead

    def _new_ready_index(self: Any, backlog: int) -> ReadyIndex:
        return ReadyIndex(backlog=backlog, scan_after=self._scan_after)

    def _scan_after(self: Any, cursor: Any) -> list[Any]:
        """The next few backlog keys after ``cursor``, in order (empty when there is none)."""

        def scan() -> list[Any]:
            entries = self._reader_rec.entries
            keys = entries.keys() if cursor is None else entries.keys(min=cursor, excludemin=True)
            found: list[Any] = []
            for looked, key in enumerate(keys):
                if self._is_from_backlog(key):
                    found.append(key)
                    if len(found) >= SCAN_AHEAD:
                        break
                elif found and looked >= 2 * SCAN_AHEAD:
                    break  # enough for now; do not walk past many keys of this session
            return found

        return self._read_current(scan)

    def _is_from_backlog(self: Any, key: Any) -> bool:
        """Stored before this session and not in the delay index at open."""
        if self._key_seq(key) >= self._session_seq:
            return False
        return not self._delays.delayed_at_open(key)
