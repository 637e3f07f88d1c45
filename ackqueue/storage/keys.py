"""Item keys: puts by key, their live index and seen-set in a queue's record, and the
stored side of their reads and edits.

Keys of items as stored: the live index and the seen-set of one queue record.

A put by key stores its key on the entry (``Entry.item_key``) and in the record's live index
(``QueueRecord.keyed``: indexed key -> entry key). Whatever removes an entry calls
:func:`release` first, inside the same change, so the index never names an entry that is gone:
an item that is done (acked, or removed by a plain get) leaves its key in the seen-set
(``QueueRecord.seen``: indexed key -> until when, ``math.inf`` for ever) when it was put to be
remembered; one that is dead-lettered or removed only frees its key. Both are BTrees on disk,
read a bucket at a time, so a million keys cost the file, not the process's memory.

Keys are ``str`` or ``bytes``; they are indexed as bytes with a one-byte tag (``s`` or ``b``),
so that the two kinds never meet in one comparison (Python refuses to order them) and a
``str`` key never equals the ``bytes`` key spelled alike.

Every edit of :class:`KeyBook` re-checks, inside its change, what the caller decided from a
snapshot read before it (a key may have been taken, acked or forgotten since), so the check and
the write are one commit, and a change applied again after a conflict decides again.
:class:`KeyBook` adds them to one queue's :class:`~ackqueue.storage.book.Book`; the book, for
its part, calls :func:`release` whenever it deletes an entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ackqueue.errors import KeyHeldError, KeyTypeError, UnknownKeyError
from ackqueue.records import QueueRecord, StoredEntry, edge_loaded, loads
from ackqueue.storage.counts import count_change
from ackqueue.storage.items import Staged
from ackqueue.storage.store import Store

T = TypeVar("T")

# -- the key index and the seen-set of a queue record ---------------------------------------------

FOREVER = math.inf
ItemKey = str | bytes


def index_key(key: object) -> bytes:
    """``key`` as the indexes store it; a clear error if it is not a str or bytes."""
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return b"b" + key
    raise KeyTypeError(
        f"an item key must be a str or bytes (a URL, a job id), not {type(key).__qualname__}: "
        "convert it first, e.g. str(key)"
    )


def shown_key(indexed: bytes) -> ItemKey:
    """The key as it was given (the inverse of :func:`index_key`)."""
    if indexed[:1] == b"s":
        return indexed[1:].decode("utf-8", "surrogatepass")
    return indexed[1:]


def remember_seconds(unique: object) -> float | None:
    """How long to remember a done key: ``"forever"``, a positive number of seconds, or None
    (not at all). Anything else is a ValueError that says what is allowed."""
    if unique is None:
        return None
    if unique == "forever":
        return FOREVER
    number = isinstance(unique, int | float) and not isinstance(unique, bool)
    if number and unique > 0 and not math.isnan(unique):  # type: ignore[operator,arg-type]
        return float(unique)  # type: ignore[arg-type]
    raise ValueError(
        f"unique must be 'forever', a positive number of seconds or None, not {unique!r}"
    )


def seen_until(record: QueueRecord, indexed: bytes, now: float) -> float | None:
    """Until when ``indexed`` is remembered as seen (None: not seen, or no longer)."""
    seen = record.seen
    until = seen.get(indexed) if seen is not None else None
    return until if until is not None and until > now else None


def seen_count(record: QueueRecord, now: float) -> int | None:
    """How many keys the seen-set remembers at ``now``; None if the queue has none (no item
    was ever put to be remembered). A read of the whole seen-set, a bucket at a time: no
    counter is kept, so that a keyed ack writes nothing more than the key."""
    seen = record.seen
    if seen is None:
        return None
    return sum(1 for until in edge_loaded(seen).values() if until > now)


def release(
    record: QueueRecord, entry_key: Any, entry: StoredEntry, done_at: float | None
) -> None:
    """Entry ``entry_key`` is about to be deleted (inside that change): take its key out of
    the live index and, if it is done (``done_at``, the queue's time) and was put to be
    remembered, into the seen-set."""
    indexed = entry.item_key
    if indexed is None or record.keyed is None:
        return
    if record.keyed.get(indexed) == entry_key:
        del record.keyed[indexed]
    if done_at is not None and entry.remember is not None:
        record.seen_set()[indexed] = done_at + entry.remember


def sweep_expired(record: QueueRecord, after: bytes | None, now: float, limit: int) -> bytes | None:
    """Delete expired seen keys among the ``limit`` after ``after`` (inside a change); return
    where to go on next time (None: from the start). The seen-set is swept this way, a few
    keys per keyed put, so that expired keys do not pile up on disk."""
    seen = record.seen
    if seen is None:
        return None
    edge_loaded(seen)
    keys = seen.keys() if after is None else seen.keys(min=after, excludemin=True)
    looked: list[tuple[bytes, float]] = []
    for indexed in keys:
        looked.append((indexed, seen[indexed]))
        if len(looked) >= limit:
            break
    for indexed, until in looked:
        if until <= now:
            del seen[indexed]
    return looked[-1][0] if len(looked) >= limit else None


# -- puts by key on one queue's book ------------------------------------------------------------

SWEEP_PER_PUT = 4  # expired seen keys looked at per keyed put (see sweep_expired)

# Who holds a stored entry (shared mode marks holds on entries; in one process none is marked).
Held = Callable[[StoredEntry], object]


@dataclass
class Live:
    """A key's live item as a snapshot saw it."""

    entry_key: Any
    not_before: float


@dataclass
class NewPut:
    """A put by key to store if its key is free: the staged item, its indexed key, and how
    long to remember the key once the item is done."""

    staged: Staged
    key: bytes
    remember: float | None


@dataclass
class Revisit:
    """A put by key whose key was live: a new payload (``data``, with ``replace``) and/or a
    new due time for the waiting item ``live``."""

    key: bytes
    live: Live
    data: bytes | None
    due: float


class KeyedBook(Protocol):
    """What a :class:`KeyBook` uses of its queue's :class:`~ackqueue.storage.book.Book` (which
    imports this module: the book releases keys)."""

    name: str
    store: Store
    record: QueueRecord

    def read(self, read: Callable[[QueueRecord], T]) -> T: ...

    def store_entry(
        self,
        staged: Staged,
        now: float,
        item_key: bytes | None = None,
        remember: float | None = None,
    ) -> None: ...

    def remove_entry(self, key: Any, done: bool = True) -> None: ...


class KeyBook:
    def __init__(self, book: KeyedBook, held: Held) -> None:
        self.book = book
        self._held = held
        self._swept: bytes | None = None  # where the lazy sweep of the seen-set goes on

    # -- reads (through the book's reader; the caller serialises them) ----------------------

    def states(self, keys: list[bytes], now: float) -> list[Live | bool]:
        """Each key's live item, True if it is seen (remembered), False if it is free."""

        def read(record: QueueRecord) -> list[Live | bool]:
            index = record.keyed
            found: list[Live | bool] = []
            for key in keys:
                entry_key = index.get(key) if index is not None else None
                if entry_key is not None:
                    entry = record.entry_at(entry_key)
                    found.append(Live(entry_key, float(entry.not_before)))
                else:
                    found.append(seen_until(record, key, now) is not None)
            return found

        return self.book.read(read)

    def live(self, key: bytes) -> Live | None:
        """``key``'s live item, or None."""

        def read(record: QueueRecord) -> Live | None:
            entry_key = record.keyed.get(key) if record.keyed is not None else None
            if entry_key is None:
                return None
            return Live(entry_key, float(record.entry_at(entry_key).not_before))

        return self.book.read(read)

    def seen(self, key: bytes, now: float) -> bool:
        return self.book.read(lambda record: seen_until(record, key, now) is not None)

    def seen_count(self, now: float) -> int:
        return self.book.read(lambda record: seen_count(record, now) or 0)

    def matching(self, wanted: Callable[[bytes], bool]) -> list[Live]:
        """Every stored entry whose pickle ``wanted`` accepts (a read of them all)."""

        def read(record: QueueRecord) -> list[Live]:
            return [Live(key, float(entry.not_before))
                    for key, entry in record.entry_items()
                    if loads(entry) and not entry.done and wanted(entry.data)]

        return self.book.read(read)

    # -- edits (inside Store.run) -------------------------------------------------------------

    def admitter(
        self, new: list[NewPut], revisits: list[Revisit], now: float
    ) -> Callable[[], tuple[list[bool], list[bool]]]:
        """The edit storing each new put whose key is still free and applying each revisit
        whose item is still live, waiting and the same; it returns which were (in order)."""
        record, book, held = self.book.record, self.book, self._held

        def admit() -> tuple[list[bool], list[bool]]:
            index = record.key_index()
            stored: list[bool] = []
            for put in new:
                free = put.key not in index and seen_until(record, put.key, now) is None
                stored.append(free)
                if free:
                    self._insert(record, put, now)
            if any(stored):
                count_change(record, sum(stored))
            if new:
                record.reserve_seq(max(put.staged.seq for put in new))
            revised = [self._revise(record, index, r, held) for r in revisits]
            self._swept = sweep_expired(record, self._swept, now, SWEEP_PER_PUT)
            book.store.note_dropped(sum(r.data is not None for r in revisits))
            return stored, revised

        return admit

    def taken(
        self, new: list[NewPut], revisits: list[Revisit], now: float
    ) -> Callable[[], list[bytes]]:
        """A read, inside a commit, of the keys among ``new`` that are no longer free and of
        ``revisits`` whose item is no longer live, waiting and the same: what ``admitter``
        would now refuse."""
        record, held = self.book.record, self._held

        def read() -> list[bytes]:
            index = record.keyed
            found = [put.key for put in new
                     if (index is not None and put.key in index)
                     or seen_until(record, put.key, now) is not None]
            for revisit in revisits:
                entry_key = revisit.live.entry_key
                entry = record.entry(entry_key)
                if (index is None or index.get(revisit.key) != entry_key or entry is None
                        or held(entry) is not None):
                    found.append(revisit.key)
            return found

        return read

    def _insert(self, record: QueueRecord, put: NewPut, now: float) -> None:
        staged = put.staged
        self.book.store_entry(staged, now, item_key=put.key, remember=put.remember)
        index = record.key_index()
        old = record.seen
        if old is not None and put.key in old:
            del old[put.key]  # expired (seen_until said so): the key starts over
        index[put.key] = staged.key

    @staticmethod
    def _revise(record: QueueRecord, index: Any, revisit: Revisit, held: Held) -> bool:
        entry_key = revisit.live.entry_key
        if index.get(revisit.key) != entry_key:
            return False  # acked, removed or replaced since the snapshot
        entry = record.entry_at(entry_key)
        if held(entry) is not None:
            return False  # another process holds it
        if revisit.data is not None:
            record.change_entry(entry_key, data=revisit.data)
        if revisit.due != entry.not_before:
            record.change_entry(entry_key, not_before=revisit.due)
            if revisit.due:
                record.delay_index()[entry_key] = revisit.due
            elif record.delayed is not None and entry_key in record.delayed:
                del record.delayed[entry_key]
        return True

    def remover(self, entry_keys: list[Any], key: bytes | None) -> Callable[[], list[bool]]:
        """The edit deleting waiting entries (not done: their keys are freed, not seen);
        which were. With ``key`` (one entry, removed by key), a failure is an error instead."""
        record, book, held, name = self.book.record, self.book, self._held, self.book.name

        def remove() -> list[bool]:
            removed: list[bool] = []
            for entry_key in entry_keys:
                entry = record.entry(entry_key)
                index = record.keyed
                if key is not None and (index is None or index.get(key) != entry_key):
                    raise UnknownKeyError(f"queue {name!r} has no live item with key "
                                          f"{shown_key(key)!r}: nothing was removed")
                if entry is None or held(entry) is not None:
                    if key is not None:
                        raise KeyHeldError(_held_message(name, key))
                    removed.append(False)
                    continue
                # Written, so that a take racing this (another process's get) conflicts:
                # the take writes only the entry, this only the tree and the key index.
                record.fence_entry(entry_key)
                book.remove_entry(entry_key, done=False)
                removed.append(True)
            return removed

        return remove

    def forgetter(self, key: bytes, now: float) -> Callable[[], bool]:
        """The edit forgetting a seen key; whether it was remembered (and not expired)."""
        record = self.book.record

        def forget() -> bool:
            seen = record.seen
            if seen is None or key not in seen:
                return False
            remembered = seen_until(record, key, now) is not None
            del seen[key]
            return remembered

        return forget


def _held_message(name: str, key: bytes) -> str:
    return (f"the item with key {shown_key(key)!r} of queue {name!r} is held by a consumer: "
            "it cannot be removed now; its consumer's ack (or reject) ends it, a nack makes "
            "it waiting again, and then remove() works")
