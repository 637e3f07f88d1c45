"""Dead letters as stored: items taken out of delivery, kept with why.

An item becomes a dead letter when a consumer rejects it, when it was delivered
``max_attempts`` times without an ack, or when it can no longer be unpickled. Each queue keeps
its own dead letters in its stored record, numbered by an id that is never reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ackqueue.errors import ItemLoadError
from ackqueue.records import DeadRecord, QueueRecord, unsafe_record
from ackqueue.storage.counts import count_change
from ackqueue.storage.items import Codec
from ackqueue.storage.keys import release


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter as :meth:`AckQueue.dead_letters` lists it.

    ``when`` and ``put_at`` are epoch seconds (from the queue's clock); ``attempts`` counts
    the deliveries the item had. ``item`` is an :class:`UnloadableItem` when the item cannot
    be unpickled.
    """

    id: int
    item: Any
    attempts: int
    reason: str
    when: float
    put_at: float


@dataclass(frozen=True)
class UnloadableItem:
    """Stands in for a dead item whose bytes its queue's serializer cannot decode (a pickle
    whose class is gone, bytes that are not JSON, a record that was not ackqueue's)."""

    data: bytes
    error: str


def bury(record: QueueRecord, key: Any, reason: str, when: float, attempts: int | None) -> int:
    """Move entry ``key`` to the dead letters (inside a change); return its dead-letter id.

    ``attempts`` None keeps the stored count.
    """
    entry = record.entry_at(key)  # first, so a missing key changes nothing
    try:
        data, put_at, stored, group = entry.data, entry.put_at, entry.attempts, entry.group
        record.vouch(key, entry)
        loaded = True
    except Exception as exc:
        if unsafe_record(exc) is None:
            raise
        # A record that names what no queue file holds: its bytes are kept, none of it loaded.
        data, put_at, stored, group = raw_record(entry), 0.0, 0, None
        loaded = False
    dead = record.dead_tree()
    record.dead_next += 1
    dead_id = record.dead_next
    count = stored if attempts is None else attempts
    letter = dead[dead_id] = DeadRecord(key, data, put_at, count, reason, when)
    if group is not None:
        letter.group = group
    record.dead_length.change(1)
    if loaded:
        release(record, key, entry, None)  # a dead letter gives up its key (see keys.py)
    record.drop_entry(key)
    count_change(record, -1)
    return dead_id


def raw_record(obj: Any) -> bytes:
    """The stored bytes of persistent ``obj``'s record, as the storage holds them."""
    data: bytes = obj._p_jar.db().storage.load(obj._p_oid)[0]
    return data


def listed(dead_id: int, rec: DeadRecord, codec: Codec) -> DeadLetter:
    try:
        item = codec.decode(rec.data, f"dead letter {dead_id}")
    except ItemLoadError as exc:
        item = UnloadableItem(rec.data, str(exc))
    return DeadLetter(dead_id, item, rec.attempts, rec.reason, rec.when, rec.put_at)
