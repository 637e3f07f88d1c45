"""The stored side of puts by key: reads and edits of a queue's key index and seen-set.

Every edit here re-checks, inside its change, what the caller decided from a snapshot read
before it (a key may have been taken, acked or forgotten since), so the check and the write are
one commit, and a change applied again after a conflict decides again. The record functions
they use are in :mod:`.keyindex`; :class:`KeyBook` adds them to one queue's :class:`Book`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ackqueue.errors import KeyHeldError, UnknownKeyError
from ackqueue.records import Entry, QueueRecord
from ackqueue.storage.book import Book
from ackqueue.storage.counts import count_change
from ackqueue.storage.items import Staged
from ackqueue.storage.keyindex import seen_until, shown_key, sweep_expired

SWEEP_PER_PUT = 4  # expired seen keys looked at per keyed put (see sweep_expired)

# Who holds a stored entry (shared mode marks holds on entries; in one process none is marked).
Held = Callable[[Entry], object]


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


class KeyBook:
    def __init__(self, book: Book, held: Held) -> None:
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
                    entry = record.entries[entry_key]
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
            return Live(entry_key, float(record.entries[entry_key].not_before))

        return self.book.read(read)

    def seen(self, key: bytes, now: float) -> bool:
        return self.book.read(lambda record: seen_until(record, key, now) is not None)

    def matching(self, wanted: Callable[[bytes], bool]) -> list[Live]:
        """Every stored entry whose pickle ``wanted`` accepts (a read of them all)."""

        def read(record: QueueRecord) -> list[Live]:
            return [Live(key, float(entry.not_before))
                    for key, entry in record.entries.items()
                    if not entry.done and wanted(entry.data)]

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
                entry = record.entries.get(entry_key)
                if (index is None or index.get(revisit.key) != entry_key or entry is None
                        or held(entry) is not None):
                    found.append(revisit.key)
            return found

        return read

    def _insert(self, record: QueueRecord, put: NewPut, now: float) -> None:
        staged = put.staged
        entry = self.book.store_entry(staged, now)
        entry.item_key = put.key
        if put.remember is not None:
            entry.remember = put.remember
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
        entry = record.entries[entry_key]
        if held(entry) is not None:
            return False  # another process holds it
        if revisit.data is not None:
            entry.data = revisit.data
        if revisit.due != entry.not_before:
            entry.not_before = revisit.due
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
                entry = record.entries.get(entry_key)
                index = record.keyed
                if key is not None and (index is None or index.get(key) != entry_key):
                    raise UnknownKeyError(f"queue {name!r} has no live item with key "
                                          f"{shown_key(key)!r}: nothing was removed")
                if entry is None or held(entry) is not None:
                    if key is not None:
                        raise KeyHeldError(_held_message(name, key))
                    removed.append(False)
                    continue
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
