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
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ZODB.POSException import ConflictError
from ZODB.POSException import StorageError as ZODBStorageError

from ackqueue.base.clock import Clock
from ackqueue.base.keyids import KeySet
from ackqueue.delivery.ordering import Ordering
from ackqueue.delivery.supply import GetAgain
from ackqueue.errors import StorageError
from ackqueue.records import SHARD_BITS, QueueRecord, edge_loaded, loads
from ackqueue.shared.holdmarks import live_holder
from ackqueue.shared.sessions import SESSIONS_KEY
from ackqueue.storage.book import Book, chunks

_UNKNOWN = object()
# Processes that all take the head item conflict, and all but one retry. After losing such a
# race, for CONTENDED_SECONDS a scan from the head passes over a random number of ready keys,
# below SPREAD for each other process with a session; uncontended, gets keep key order.
SPREAD = 32
CONTENDED_SECONDS = 1.0
# Entries near the head were mostly changed by other processes since this one last read them:
# load a few at once (the first ready one is usually among them).
SCAN_PREFETCH = 8
COUNT_SECONDS = 0.1
# The stored delay index keeps an entry until its item is taken or settled, also once it is
# due: the count subtracts only those still ahead, read one by one while there are at most
# this many (at most every COUNT_SECONDS: a few ms of CPU a second at most). Past it every
# entry is subtracted, and the estimate may be short by the items due but not yet taken.
DELAYS_READ = 4096
# Keys that left the queue here (acked, buried, taken by a plain get) remembered, so that a
# look from the head skips their entries, marked done until the sweeper deletes them, without
# loading each (a round trip to the server: one an item, a sixth of a get + ack's CPU).
GONE_KEPT = 4096


@contextlib.contextmanager
def reading(where: str) -> Iterator[None]:
    """ZODB's read failures (a ZEO server away: ClientDisconnected) as ackqueue's own error."""
    try:
        yield
    except ConflictError:
        raise
    except ZODBStorageError as exc:
        raise StorageError(f"cannot read queue storage {where}: {exc!r}") from exc


StoppedGroups = Callable[[QueueRecord, Any, float], set[str | None]]


def ahead(delayed: Any, now: float) -> int:
    """How many entries of the delay index ``delayed`` (key -> due time; None: none made)
    are not yet due: exactly up to DELAYS_READ entries, else all of them."""
    if delayed is None:
        return 0
    n = len(delayed)
    if n > DELAYS_READ:
        return n
    return sum(1 for due in edge_loaded(delayed).values() if due > now)


class Holder(Protocol):
    """What the index asks of the shared mode it serves."""

    @property
    def sid(self) -> str: ...

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
        ordering: Ordering,
        stopped: StoppedGroups | None = None,
    ) -> None:
        """``stopped(record, root, now)``: the groups that may not deliver now."""
        self._holder = holder
        self._stopped = stopped
        self._book = book
        self._clock = clock
        self._key_seq = ordering.key_seq
        key_id = ordering.key_id
        self._stripes = 1  # live sessions: each takes first the keys of its own stripe
        self._stripe = 0
        self._cursor: Any = None
        self._next: Any = _UNKNOWN
        self._estimate = 0
        self._others = 0  # how many other sessions take from this queue
        self._contended_until = 0.0
        self._stale = True
        self._counted_until = 0.0
        self.vanished = KeySet(key_id)  # popped keys whose entry was gone when loaded
        self._key_id = key_id
        self._gone: set[Any] = set()  # ids of keys that left the queue here (GONE_KEPT)
        self._gone_order: deque[Any] = deque()

    def __len__(self) -> int:
        if self._stale:
            self.refresh()
        if self._next is _UNKNOWN:
            self._next = self._scan(self._cursor)
        return 0 if self._next is None else max(1, self._estimate)

    def total(self) -> int:
        """The estimate of :meth:`refresh`, which counts the entries of groups that may not
        deliver now (paused, at their cap or in their interval) too: ``len`` is 0 when only
        such entries are left, and ``maxsize`` would not count them."""
        return max(len(self), self._estimate)

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
        self._counted_until = 0.0  # our own change: counted at once

    def offer(self, key: Any) -> None:
        """``key`` was just stored (a put of ours landed) or fell due: offer it next if it comes
        first. It is never a hold of ours to give back, though a thread here may have found it
        in the store and taken it already: then it stays with that thread."""
        if key in self._holder.taking or key in self._holder.mine:
            return
        # Committed already: the next look at the store counts it (adding it to the estimate
        # here would count it twice whenever the watcher's refresh came in between).
        self._stale = True
        self._counted_until = 0.0  # our own put: counted at once

    def withdraw(self, key: Any, backlog: bool) -> bool:
        """Not ours to hand out while the caller's change removes or rewrites ``key``'s entry
        (that change checks no other process holds it); False if a thread here has it."""
        if key in self._holder.taking or key in self._holder.mine:
            return False
        self._stale = True  # the estimate is read again once the change has committed
        return True

    def gone(self, key: Any) -> None:
        """``key`` left the queue for good here, committed: never ready again, so a look need
        not load its entry (done until swept). The newest GONE_KEPT are remembered."""
        key_id = self._key_id(key)
        if key_id in self._gone:
            return
        self._gone.add(key_id)
        self._gone_order.append(key_id)
        if len(self._gone_order) > GONE_KEPT:
            self._gone.discard(self._gone_order.popleft())

    def lost_race(self) -> None:
        """Another process took a key we claimed: spread our next takes for a while."""
        self._contended_until = time.monotonic() + CONTENDED_SECONDS

    def _spread(self, cursor: Any) -> int:
        if cursor is not None or time.monotonic() > self._contended_until:
            return 0
        return random.randrange(SPREAD * max(1, self._others))

    @property
    def cursor(self) -> None:
        """No backlog read-ahead in shared mode (see delivery.itemcache): other processes take
        entries ahead of us. Pickles of our own puts are still served from the item cache;
        a take re-reads the attempts from the store anyway."""
        return None

    def refresh(self) -> None:
        """Move to the latest commit and start reading from the head again."""
        book = self._book
        self._stale = True
        with reading(book.store.where):
            book.catch_up()

        if time.monotonic() >= self._counted_until:
            # Counting reads the Length (changed by every ack), every session's holds tree
            # and record (changed by takes and renewals): loads from the server, with the
            # mutex held, at every refresh (every commit anywhere, up to 100 times a second).
            # The estimate may lag a little; whether anything is ready never does.
            with reading(book.store.where):
                self._estimate = book.read(self._count)
            self._counted_until = time.monotonic() + COUNT_SECONDS
        self._cursor, self._next, self._stale = None, _UNKNOWN, False

    def _count(self, record: QueueRecord) -> int:
        """The estimate of ready entries; this session's stripe, as a side effect."""
        delayed = record.delayed
        n = record.length() - self._holder.reader_hold_count()
        sessions = self._book.read_root().get(SESSIONS_KEY, {})
        # Stripes go to the sessions that take items from this queue (a process taking from
        # another queue of the database is none of them), so that one consumer beside any
        # number of producers keeps key order; until our first take we are not striped.
        name = self._book.name
        takers = [sid for sid, session in sessions.items() if session.takes_from(name)]
        mine = self._holder.sid
        # Those that race this one for the head (producers and other queues' consumers do not).
        self._others = len(takers) - (mine in takers)
        self._stripes = len(takers) if mine in takers else 1
        self._stripe = takers.index(mine) if mine in takers else 0
        return int(n - ahead(delayed, self._clock()))

    def _scan(self, cursor: Any) -> Any:
        """The next ready key after ``cursor``: first in this session's stripe, else any.

        Processes that all take from the head conflict on the same entries. So each of the
        ``n`` live sessions first takes keys whose sequence number is its rank modulo ``n``
        (no entry of another stripe is even loaded), and only when its stripe has nothing
        ready takes (steals) any ready key, spread at random after a lost race. Across
        processes the order is thus key order within about ``n`` places.
        """
        holder_, key_seq, key_id, gone = self._holder, self._key_seq, self._key_id, self._gone
        stripes, stripe = self._stripes, self._stripe

        def first(record: QueueRecord, start: Any, spread: int, striped: bool) -> Any:
            skip = spread
            delayed = record.delayed
            now = self._clock()
            stopped = (
                self._stopped(record, self._book.read_root(), now)
                if self._stopped is not None
                else None
            )

            def candidates() -> Iterator[tuple[Any, Any]]:
                # Entries not yet due are passed over by their key, before their entries are
                # loaded: a queue holding many (jobs put hours ahead) made each look, at every
                # commit anywhere, load every one of them (a probe: a put cost 16 ms of CPU
                # once 3,000 were delayed, 1 ms after); and a block of them at once, where
                # every entry of the block waits (a lookup a key was still most of a put's
                # CPU with 8,000 delayed).
                after, mixed = start, None
                while True:
                    for key in record.entry_keys(after=after):
                        if (
                            (striped and key_seq(key) % stripes != stripe)
                            or key in holder_.taking
                            or key in holder_.mine
                            or key_id(key) in gone
                        ):
                            continue
                        if delayed is not None and delayed.get(key, 0) > now:
                            # (A PriorityAckQueue's keys are tuples: no blocks there.)
                            block = key >> SHARD_BITS if isinstance(key, int) else mixed
                            if block != mixed:
                                last = record.waiting_through(key, now)
                                if last is None:
                                    mixed = block  # key by key, this block
                                else:
                                    after = last
                                    break
                            continue
                        yield key, record.entry_at(key)
                    else:
                        return

            found = None
            sessions = self._book.read_root().get(SESSIONS_KEY)
            for chunk in chunks(candidates(), None, SCAN_PREFETCH):
                for key, entry in chunk:
                    # A record that does not load (crafted) is left to the get that takes
                    # it: the get moves it to the dead letters.
                    if loads(entry) and (
                        entry.done or live_holder(entry, sessions) is not None
                        or (stopped and entry.group in stopped)
                    ):
                        continue
                    found = key
                    if not skip:
                        return found
                    skip -= 1
            return found

        book = self._book
        with reading(book.store.where):
            if stripes > 1:
                found = book.read(lambda record: first(record, cursor, 0, True))
                if found is not None:
                    return found
                # The cursor passed over the other stripes' keys without looking at them: a
                # steal looks from the head (a sole consumer beside a dead session's stripe
                # would otherwise see half the queue).
                cursor = None
            spread = self._spread(cursor)
            return book.read(lambda record: first(record, cursor, spread, False))
