"""What a queue can hand out: the ready keys in order, the delayed keys with their timers,
and the pickles it knows without a read.

At open, every stored entry not in the delay index is ready: the *backlog*, read lazily from
the book in key order behind the ready index's cursor. Entries become ready later when a put
lands, a delay falls due, or a key comes back (nack, release, a failed get). After an immediate
shutdown (``drained``) nothing becomes ready any more: storage keeps it for the next start.

Every method runs with the queue's mutex held, which also serialises the book's reads. A
:class:`Claim` is an item taken out of the supply on its way to a caller.

:class:`Delays` holds items that are stored but not yet due (``put(delay=)``, ``not_before=``,
``nack(delay=)``). A delayed entry carries its due time (``Entry.not_before``) and is listed in
its queue record's delay index, so that a reopen finds every delayed entry without reading the
others. In memory, entries not yet due wait here until a timer makes them ready. Entries named
in the index at open are kept out of the lazy backlog scan, which would otherwise hand them out
early; those already due at open are ready at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ZODB.POSException import ReadConflictError

from ackqueue.base.clock import Clock
from ackqueue.base.timers import Timers
from ackqueue.delivery.conditions import Lifecycle, Signals, Tasks, notify_waiting
from ackqueue.delivery.groups import Group, GroupedReadyIndex, Indexing
from ackqueue.delivery.itemcache import READ_AHEAD, ItemCache
from ackqueue.delivery.ordering import Ordering
from ackqueue.delivery.ready import ReadyKeys
from ackqueue.records import QueueRecord
from ackqueue.storage.book import Book, group_pauses
from ackqueue.storage.items import Staged

SCAN_AHEAD = 64  # backlog keys read per look at the stored tree (see ready.py)

class Supply:
    """``indexing`` (the mode's) makes the ready index, and says whether it learns groups."""

    def __init__(
        self,
        signals: Signals,
        lifecycle: Lifecycle,
        tasks: Tasks,
        book: Book,
        ordering: Ordering,
        clock: Clock,
        timers: Timers,
        indexing: Indexing,
    ) -> None:
        self._signals = signals
        self._life = lifecycle
        self._tasks = tasks
        self._book = book
        self._order = ordering
        self._clock = clock
        self._timers = timers
        self._indexing = indexing
        self.groups: GroupedReadyIndex | None = None  # the ready index, when it knows groups
        self.items = ItemCache()
        self._withdrawn: set[Any] = set()  # ids of backlog keys taken out by withdraw_locked
        self.delays = Delays(book.delayed_at_open(), clock(), ordering.key_id)
        self._session_seq = book.seq_reserved()
        self.staged = 0  # puts keyed and counted, their commit under way
        self.tx_staged = 0  # puts waiting for their transaction to commit
        with signals.mutex:
            backlog = book.count() - len(self.delays.at_open)
            self.ready: ReadyKeys
            self.ready, self.groups = self._open_index(backlog)
            for key in self.delays.due_at_open:
                self.ready.offer(key)
            for key, when in self.delays.pending.values():
                timers.at_wall(when, self._fall_due_callback(key, when))
            # Under the mutex: in shared mode the session's watcher reads through the same
            # book as soon as the index exists.
            tasks.unfinished = self.ready_total() + len(self.delays)

    def _open_index(self, backlog: int) -> tuple[ReadyKeys, GroupedReadyIndex | None]:
        return self._indexing.open_index(self._book, backlog, self._scan_after, self._schedule)

    def _schedule(self, when: float, wake: Callable[[], bool]) -> None:
        def fire() -> None:
            if wake():
                self._signals.not_empty.notify_all()

        self._timers.at(when, fire)

    def __len__(self) -> int:
        return len(self.ready)

    def ready_total(self) -> int:
        """Ready keys, also those of groups that may not deliver right now."""
        return self.ready.total() if self.groups is None else self.groups.total()

    def waiting(self) -> int:
        """What ``maxsize`` counts: ready (in any group), and puts on their way."""
        return self.ready_total() + self.staged + self.tx_staged

    def head(self) -> Any:
        """The first ready key, or None (a priority queue compares new items with it)."""
        return self.ready.peek() if len(self.ready) else None

    def pop(self) -> Any:
        return self.ready.pop()

    # -- keys becoming ready ---------------------------------------------------------------

    def make_ready_locked(self, key: Any) -> None:
        """``key`` comes back (nack, release, a get that failed): ready in its place."""
        if self._life.drained:
            self._forget_drained()
            return
        self.ready.push(key)
        self._signals.ready_locked()

    def offer_locked(self, key: Any, group: Group = None) -> None:
        """``key`` was stored or fell due, never held here: ready (``group``: a key new to
        this process, with its group)."""
        if group is not None:
            self._note_group(key, group)
        if self._life.drained:
            self._forget_drained()
            return
        self.ready.offer(key)
        self._signals.ready_locked()

    def _forget_drained(self) -> None:
        """After an immediate shutdown a key that would be ready stays stored for the next
        start, and ``join()`` no longer waits for it (a put that landed late, an item given
        back by a consumer or a failed get)."""
        self._tasks.finished_locked(1)

    def land_locked(self, key: Any, due: float) -> None:
        """A stored ``key`` is ready now, or once ``due`` has passed."""
        if due and due > self._clock() and not self._life.drained:
            self.delays.add(key, due)
            self._timers.at_wall(due, self._fall_due_callback(key, due))
            # A delayed key takes no place under maxsize, and may have held one until now (a
            # put landing, a waiting item given a later time): a put waiting for room goes on.
            notify_waiting(self._signals.not_full)
        else:
            self.offer_locked(key)

    def land_staged_locked(self, staged: Staged, cache: bool = True) -> None:
        """A put committed: ready (its pickle kept for the get, see itemcache.py, unless not
        ``cache``) or delayed."""
        if staged.group is not None:
            self._note_group(staged.key, staged.group)
        if staged.not_before:
            self.land_locked(staged.key, staged.not_before)
            return
        if cache:
            self.items.add(staged.seq, staged.data, 0)
        self.offer_locked(staged.key)

    def _note_group(self, key: Any, group: Group) -> None:
        groups = self._grouped()
        if groups is not None:
            groups.assign(key, group)

    def _grouped(self) -> GroupedReadyIndex | None:
        """The grouped index, switched to now if need be (None: the mode's own index reads
        groups from the store)."""
        if self.groups is None:
            groups = self._indexing.group_index(self.ready, self._schedule)
            if groups is not None:
                for group, until in group_pauses(self._book).items():
                    groups.pause(group, until)
                self.ready = self.groups = groups
        return self.groups

    # -- acting on whole groups ----------------------------------------------------------------

    def pause_group_locked(self, group: str, until: float) -> None:
        groups = self._grouped()
        if groups is not None and groups.pause(group, until):
            self._signals.not_empty.notify_all()

    def group_changed_locked(self, group: str) -> None:
        """``group``'s own settings changed (the rules' ``own`` says how)."""
        groups = self._grouped()
        # None: the mode reads the rules from the store, so gets look again there.
        if groups is None or groups.changed(group):
            self._signals.not_empty.notify_all()

    def take_group_locked(self, group: str) -> list[tuple[Any, float]]:
        """Take the waiting keys of ``group`` out, ready ones with due time 0 (to remove them;
        :meth:`land_locked` puts one back, :meth:`removed_locked` forgets them)."""
        groups = self.groups
        if groups is None:
            return []
        taken: list[tuple[Any, float]] = [(key, 0.0) for key in groups.take_lane(group)]
        for key_id, (key, when) in list(self.delays.pending.items()):
            if groups.group_of(key) == group:
                del self.delays.pending[key_id]
                taken.append((key, when))
        return taken

    def removed_locked(self, keys: list[Any]) -> None:
        """Keys taken out by :meth:`take_group_locked` were deleted from the store."""
        for key in keys:
            self.gone_locked(key)
        self._tasks.finished_locked(len(keys))
        self._signals.not_full.notify(len(keys))

    # -- keys out no longer (for the hold counts of groups) ----------------------------------

    def released_locked(self, key: Any) -> None:
        """A popped key is settled or voided without coming back here (its group counts one
        fewer out)."""
        if self.groups is not None and self.groups.release(key):
            self._signals.not_empty.notify_all()

    def gone_locked(self, key: Any) -> None:
        """``key`` left the queue for good (acked, buried, removed, taken by a plain get)."""
        if self.groups is not None and self.groups.forget(key):
            self._signals.not_empty.notify_all()

    def withdraw_locked(self, key: Any) -> bool:
        """Keep stored ``key`` from being handed out while its entry is removed or rewritten
        (a remove, a put by key that revisits it); give it back with :meth:`land_locked`, or
        forget it once removed. False if it is held or being handed out."""
        self.items.discard(self._order.key_seq(key))  # its pickle may be about to change
        if self.delays.fall_due(key):
            return True
        backlog = self._is_from_backlog(key)
        if not self.ready.withdraw(key, backlog):
            return False
        if backlog:  # the backlog scan must not find it again: it comes back by land_locked
            self._withdrawn.add(self._order.key_id(key))
        return True

    def _fall_due_callback(self, key: Any, due: float | None = None) -> Callable[[], None]:
        """What the timer of ``key``'s delay until ``due`` does (a timer is never cancelled:
        one whose delay was since replaced, by a later time, finds another due there)."""

        def fall_due() -> None:
            if self.delays.fall_due(key, due):
                self.offer_locked(key)

        return fall_due

    def drain_locked(self) -> int:
        """Forget what is ready or delayed (storage keeps it); return how many were."""
        forgotten = self.ready_total() + len(self.delays)
        self.ready, self.groups = self._open_index(0)
        self.delays.pending.clear()
        return forgotten

    # -- reading what is handed out ----------------------------------------------------------

    def load(self, key: Any) -> tuple[bytes, int]:
        """The stored pickle and attempts of ``key``, from the item cache when it has them
        (see itemcache.py), else read, with the next few backlog entries read ahead."""
        known = self.items.take(self._order.key_seq(key))
        if known is not None:
            return known
        loaded = self._book.load(key)
        cursor = self.ready.cursor
        if cursor is not None and self._is_from_backlog(key):
            self._read_ahead(self._book.read_record, cursor)
        return loaded

    def _read_ahead(self, record: QueueRecord, cursor: Any) -> None:
        """Keep the next backlog entries after the backlog cursor: undelivered, untouched."""
        try:
            for n, (later, entry) in enumerate(record.entry_items(after=cursor)):
                seq = self._order.key_seq(later)
                if n >= READ_AHEAD or seq in self.items:
                    break
                if not self._is_from_backlog(later):
                    continue
                record.vouch(later, entry)
                if not self.items.add(seq, entry.data, entry.attempts):
                    break
        except ReadConflictError:
            pass  # a pack meanwhile: those entries are read one by one instead

    def _scan_after(self, cursor: Any) -> list[Any]:
        """The next few backlog keys after ``cursor``, in order (empty when there is none)."""

        def scan(record: QueueRecord) -> list[Any]:
            found: list[Any] = []
            for looked, key in enumerate(record.entry_keys(after=cursor)):
                if self._is_from_backlog(key):
                    found.append(key)
                    if len(found) >= SCAN_AHEAD:
                        break
                elif found and looked >= 2 * SCAN_AHEAD:
                    break  # enough for now; do not walk past many keys of this session
            return found

        return self._book.read(scan)

    def _is_from_backlog(self, key: Any) -> bool:
        """Stored before this session, not in the delay index at open, not withdrawn."""
        if self._order.key_seq(key) >= self._session_seq:
            return False
        if self._withdrawn and self._order.key_id(key) in self._withdrawn:
            return False
        return not self.delays.delayed_at_open(key)


class GetAgain(Exception):
    """Nothing could be claimed after all (every staged put that a get waited for failed, or
    another process took the item first): wait again for a real item."""


@dataclass
class Claim:
    """An item taken out of the ready index, on its way to a caller."""

    key: Any
    item: Any
    attempts: int
    delivery_id: int | None = None  # chosen before the hold is stored (shared mode)
    # time.monotonic() when it was claimed, before its hold was stored: a hold is only as
    # sound as this process's session since then (StoredHolds.may_be_void)
    taken_at: float = field(default_factory=time.monotonic)
    # The stored bytes it was loaded from, where another process may rewrite them before the
    # take commits (shared mode: a put by key with replace=True); None where none can.
    data: bytes | None = None


class Delays:
    """The delayed keys in memory, each under its always-hashable id (``key_id``): a
    PriorityAckQueue key holds the item, which may be a dict or a list."""

    def __init__(
        self, items: list[tuple[Any, float]], now: float, key_id: Callable[[Any], Any]
    ) -> None:
        self._key_id = key_id
        self.at_open: frozenset[Any] = frozenset(key_id(key) for key, _when in items)
        self.due_at_open: list[Any] = [key for key, when in items if when <= now]
        self.pending: dict[Any, tuple[Any, float]] = {
            key_id(key): (key, when) for key, when in items if when > now
        }

    def __len__(self) -> int:
        return len(self.pending)

    def delayed_at_open(self, key: Any) -> bool:
        """Whether ``key`` was in the stored delay index when the queue was opened."""
        return bool(self.at_open) and self._key_id(key) in self.at_open

    def add(self, key: Any, due: float) -> None:
        self.pending[self._key_id(key)] = (key, due)

    def fall_due(self, key: Any, due: float | None = None) -> bool:
        """Take ``key`` out of the delayed ones; False if it was not there (any more), or, given
        ``due``, is there until another time (its delay was replaced since)."""
        key_id = self._key_id(key)
        found = self.pending.get(key_id)
        if found is None or (due is not None and found[1] != due):
            return False
        del self.pending[key_id]
        return True
