"""The ready items in shared mode: the first stored entries that no process holds.

In one process, :mod:`ackqueue.ready` keeps ready keys in memory. Shared by several processes,
the stored tree is the only truth: this index reads it through the queue's reader connection,
which the session's watcher moves to the latest commit whenever another process commits.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ZODB.POSException import ConflictError
from ZODB.POSException import StorageError as ZODBStorageError

from ackqueue.base.keyids import KeySet
from ackqueue.delivery.claims import GetAgain
from ackqueue.errors import StorageError
from ackqueue.shared.holdmarks import holder
from ackqueue.shared.sessions import SESSIONS_KEY
from ackqueue.storage.reading import ReaderMixin

if TYPE_CHECKING:
    from ackqueue.shared.mode import SharedQueue

_UNKNOWN = object()
# Processes that all take the head item conflict, and all but one retry. After losing such a
# race, for CONTENDED_SECONDS a scan from the head passes over a random number of ready keys,
# below SPREAD for each other process with a session; uncontended, gets keep key order.
SPREAD = 32
CONTENDED_SECONDS = 1.0


@contextlib.contextmanager
def reading(where: str) -> Iterator[None]:
    """ZODB's read failures (a ZEO server away: ClientDisconnected) as ackqueue's own error."""
    try:
        yield
    except ConflictError:
        raise
    except ZODBStorageError as exc:
        raise StorageError(f"cannot read queue storage {where}: {exc!r}") from exc


class SharedReadyIndex:
    """The ready keys in shared mode: the first stored keys that no process holds.

    Read from the reader connection's snapshot, which :meth:`refresh` moves to the latest
    commit (the session's watcher does so whenever another process commits). ``len`` is an
    estimate of how many are ready in the whole queue, but is never above zero unless
    :meth:`pop` has a key to return.
    """

    def __init__(self, shared: SharedQueue, reader: ReaderMixin) -> None:
        self._shared = shared
        self._reader: Any = reader
        self._cursor: Any = None
        self._next: Any = _UNKNOWN
        self._estimate = 0
        self._others = 0  # how many other processes have a session on this database
        self._contended_until = 0.0
        self._stale = True
        self.vanished = KeySet(shared.q._key_id)  # popped keys whose entry was gone when loaded

    def __len__(self) -> int:
        if self._stale:
            self.refresh()
        if self._next is _UNKNOWN:
            self._next = self._scan(self._cursor)
        return 0 if self._next is None else max(1, self._estimate)

    def peek(self) -> Any:
        if not len(self):
            raise GetAgain
        return self._next

    def pop(self) -> Any:
        key = self.peek()
        self._shared.taking.add(key)
        self._cursor, self._next = key, _UNKNOWN
        self._estimate -= 1
        return key

    def push(self, key: Any) -> None:
        """``key`` is ready again: give back our hold on it, or (a claim that failed before
        its take) offer it next if it comes first."""
        self._shared.taking.discard(key)
        if key in self.vanished:
            self.vanished.discard(key)
            return
        if self._shared.release_if_mine_locked(key):
            return
        self._consider(key)

    def offer(self, key: Any) -> None:
        """``key`` was just stored (a put of ours landed) or fell due: offer it next if it comes
        first. It is never a hold of ours to give back, though a thread here may have found it
        in the store and taken it already: then it stays with that thread."""
        if key in self._shared.taking or key in self._shared.mine:
            return
        self._consider(key)

    def _consider(self, key: Any) -> None:
        self._estimate += 1
        if self._next is None or (self._next is not _UNKNOWN and key < self._next):
            self._next = key
        if self._cursor is not None and key <= self._cursor:
            self._cursor = None  # rescan from the start so the key is found in its place
            self._next = _UNKNOWN

    def discard(self, key: Any) -> bool:
        return False

    def lost_race(self) -> None:
        """Another process took a key we claimed: spread our next takes for a while."""
        self._contended_until = time.monotonic() + CONTENDED_SECONDS

    def _spread(self, cursor: Any) -> int:
        if cursor is not None or time.monotonic() > self._contended_until:
            return 0
        return random.randrange(SPREAD * max(1, self._others))

    @property
    def cursor(self) -> None:
        """No backlog read-ahead in shared mode (see prefetch.py): other processes take
        entries ahead of us. Pickles of our own puts are still served from the item cache;
        a take re-reads the attempts from the store anyway."""
        return None

    def refresh(self) -> None:
        """Move to the latest commit and start reading from the head again."""
        reader = self._reader
        self._stale = True
        with reading(reader._store.where):
            reader._reader_tm.begin()
        reader._reader_synced = reader._store.commits

        def estimate() -> int:
            rec = reader._reader_rec
            delayed = rec.delayed
            n = rec.length() - self._shared.reader_hold_count()
            self._others = max(0, len(reader._reader.root().get(SESSIONS_KEY, ())) - 1)
            return int(n - (len(delayed) if delayed is not None else 0))

        with reading(reader._store.where):
            self._estimate = reader._read_current(estimate)
        self._cursor, self._next, self._stale = None, _UNKNOWN, False

    def _scan(self, cursor: Any) -> Any:
        reader, shared = self._reader, self._shared
        spread = self._spread(cursor)

        def first() -> Any:
            skip, found = spread, None
            entries = reader._reader_rec.entries
            delayed = reader._reader_rec.delayed
            now = reader._clock()
            keys = entries.keys() if cursor is None else entries.keys(min=cursor, excludemin=True)
            for key in keys:
                if key in shared.taking or key in shared.mine:
                    continue
                if holder(entries[key]) is not None:
                    continue
                if delayed is not None and delayed.get(key, 0) > now:
                    continue
                found = key
                if not skip:
                    break
                skip -= 1
            return found

        with reading(reader._store.where):
            return reader._read_current(first)
