"""The stored side of groups (``put(item, group=)``): reading every grouped entry, pausing a
group, removing a group's entries. Functions over a queue's :class:`~ackqueue.storage.book.
Book`; the edits run inside ``Store.run`` like the book's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ackqueue.records import QueueRecord
from ackqueue.storage.book import Book


def has_groups(book: Book) -> bool:
    """Whether an entry was ever put with a group (see :mod:`ackqueue.delivery.groups`)."""
    return book.read(lambda record: bool(record.grouped))


def grouped_entries(book: Book) -> list[tuple[Any, str, bool]]:
    """``(key, group, delayed)`` of every stored entry that has a group (reads them all)."""

    def read(record: QueueRecord) -> list[tuple[Any, str, bool]]:
        if not record.grouped:
            return []
        delayed = record.delayed if record.delayed is not None else {}
        return [
            (key, entry.group, key in delayed)
            for key, entry in record.entries.items()
            if entry.group is not None and not entry.done
        ]

    return book.read(read)


def group_pauses(book: Book) -> dict[str, float]:
    """Every paused group with the time its pause ends."""

    def read(record: QueueRecord) -> dict[str, float]:
        pauses = record.group_pauses
        return dict(pauses.items()) if pauses is not None else {}

    return book.read(read)


def group_pauser(book: Book, group: str, until: float) -> Callable[[], None]:
    """The edit pausing ``group`` until ``until`` (a time in the past resumes it)."""
    record = book.record

    def set_pause() -> None:
        pauses = record.group_pause_index()
        if until > 0:
            pauses[group] = until
        elif group in pauses:
            del pauses[group]

    return set_pause


def group_remover(book: Book, group: str) -> Callable[[], int]:
    """The edit removing every stored entry of ``group`` that no process holds (shared
    mode marks holds on the entries); it returns how many."""
    record = book.record

    def remove() -> int:
        if not record.grouped:
            return 0
        doomed = [
            key
            for key, entry in record.entries.items()
            if entry.group == group and getattr(entry, "holder", None) is None and not entry.done
        ]
        for key in doomed:
            record.entries[key]._p_changed = True  # conflicts with a take racing it
            book.remove_entry(key, done=False)  # a removed item's key is free, not seen
        return len(doomed)

    return remove
