"""Keys of items as stored: the live index and the seen-set of one queue record.

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
"""

from __future__ import annotations

import math
from typing import Any

from ackqueue.errors import KeyTypeError
from ackqueue.records import Entry, QueueRecord

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


def release(record: QueueRecord, entry_key: Any, entry: Entry, done_at: float | None) -> None:
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
