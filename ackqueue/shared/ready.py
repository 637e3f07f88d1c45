"""The ready items in shared mode: the first stored entries that no process holds.

In one process, :mod:`ackqueue.delivery.ready` keeps ready keys in memory. Shared by several
processes, the stored tree is the only truth: this index reads it through the queue's book,
which the session's watcher moves to the latest commit whenever another process commits.
The mode it serves (:class:`~ackqueue.shared.mode.SharedMode`) says which keys this process is
taking or holds.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ZODB.POSException import ConflictError
from ZODB.POSException import StorageError as ZODBStorageError

from ackqueue.base.clock import Clock
from ackqueue.base.keyids import KeyId, KeySet
from ackqueue.delivery.claims import GetAgain
from ackqueue.errors import StorageError
from ackqueue.records import QueueRecord
from ackqueue.shared.holdmarks import holder
from ackqueue.shared.sessions import SESSIONS_KEY
from ackqueue.storage.book import Book

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


StoppedGroups = Callable[[QueueRecord, Any, float], set[str]]


class Holder(Protocol):
    """What the index asks of the shared mode it serves."""

    @property
    def taking(self) -> KeySet: ...

    @property
    def mine(self) -> Any: ...

    def release_if_mine_locked(self, key: Any) -> bool: ...

    def reader_hold_count(self) -> int: ...


class SharedReadyIndex:
    """The ready keys in shared mode: the first stored keys that no process holds.

    Read from the book's reader snapshot, which :meth:`refresh` moves to the latest commit
    (the session's watcher does so whenever another process commits). ``len`` is an estimate
    of how many are ready in the whole queue, but is never above zero unless :meth:`pop` has a
    key to return.
    """

    def __init__(
        self,
        holder: Holder,
        book: Book,
        clock: Clock,
        key_id: KeyId,
        stopped: StoppedGroups | None = None,
    ) -> None:
        """``stopped(record, root, now)``: the groups that may not deliver now."""
        self._holder = holder
        self._stopped = stopped
        self._book = book
        self._clock = clock
        self._cursor: Any = None
        self._next: Any = _UNKNOWN
        self._estimate = 0
        self._others = 0  # how many other processes have a session on this database
        self._contended_until = 0.0
        self._stale = True
        self.vanished = KeySet(key_id)  # popped keys whose entry was gone when loaded

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
        self._holder.taking.add(key)
        self._cursor, self._next = key, _UNKNOWN
        self._estimate -= 1
        return key

    def push(self, key: Any) -> None:
        """``key`` is ready again: give back our hold on it, or (a claim that failed before
        its take) offer it next if it comes first."""
        self._holder.taking.discard(key)
        if key in self.vanished:
            self.vanished.discard(key)
            return
        if self._holder.release_if_mine_locked(key):
            return
        # Ready in the store already (a settled give-back committed its unhold; a failed claim
        # was never held): the next look reads it, in its place. Adding it to the estimate here
        # would count it twice whenever the watcher's refresh came in between.
        self._stale = True

    def offer(self, key: Any) -> None:
        """``key`` was just stored (a put of ours landed) or fell due: offer it next if it comes
        first. It is never a hold of ours to give back, though a thread here may have found it
        in the store and taken it already: then it stays with that thread."""
        if key in self._holder.taking or key in self._holder.mine:
            return
        # Committed already: the next look at the store counts it (adding it to the estimate
        # here would count it twice whenever the watcher's refresh came in between).
        self._stale = True

    def withdraw(self, key: Any, backlog: bool) -> bool:
        """Not ours to hand out while the caller's change removes or rewrites ``key``'s entry
        (that change checks no other process holds it); False if a thread here has it."""
        if key in self._holder.taking or key in self._holder.mine:
            return False
        self._stale = True  # the estimate is read again once the change has committed
        return True

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
        book = self._book
        self._stale = True
        with reading(book.store.where):
            book.catch_up()

        def estimate(record: QueueRecord) -> int:
            delayed = record.delayed
            n = record.length() - self._holder.reader_hold_count()
            self._others = max(0, len(book.read_root().get(SESSIONS_KEY, ())) - 1)
            return int(n - (len(delayed) if delayed is not None else 0))

        with reading(book.store.where):
            self._estimate = book.read(estimate)
        self._cursor, self._next, self._stale = None, _UNKNOWN, False

    def _scan(self, cursor: Any) -> Any:
        holder_, spread = self._holder, self._spread(cursor)

        def first(record: QueueRecord) -> Any:
            skip, found = spread, None
            entries = record.entries
            delayed = record.delayed
            now = self._clock()
            stopped = (
                self._stopped(record, self._book.read_root(), now)
                if self._stopped is not None
                else None
            )
            keys = entries.keys() if cursor is None else entries.keys(min=cursor, excludemin=True)
            for key in keys:
                if key in holder_.taking or key in holder_.mine:
                    continue
                entry = entries[key]
                if holder(entry) is not None:
                    continue
                if stopped and entry.group in stopped:
                    continue
                if delayed is not None and delayed.get(key, 0) > now:
                    continue
                found = key
                if not skip:
                    break
                skip -= 1
            return found

        with reading(self._book.store.where):
            return self._book.read(first)
