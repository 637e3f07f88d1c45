"""What ackqueue keeps in the database: one record per named queue, one entry per item.

Items are stored pickled, in an :class:`Entry` of their own, so that a BTree bucket holds only
keys and small references and an insert or delete rewrites little. The key of an entry is its
place in the delivery order (see ``AckQueue._make_key``).
"""

from __future__ import annotations

from typing import Any

from BTrees.Length import Length
from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree
from persistent import Persistent

ROOT_KEY = "ackqueue"

# Sequence numbers are reserved in blocks so that a put does not rewrite the queue record.
SEQ_BLOCK = 1024


class EntryTree(LOBTree):
    """The entries of a FIFO or LIFO queue, in small nodes.

    Every commit rewrites each tree node it changes whole, so small nodes keep both the bytes
    appended per put/ack and the pickling work small (LOBTree's defaults are 60 and 500).
    """

    max_leaf_size = 16
    max_internal_size = 32


class PriorityEntryTree(OOBTree):
    """The entries of a PriorityAckQueue, in small nodes (see :class:`EntryTree`)."""

    max_leaf_size = 16
    max_internal_size = 32


class Entry(Persistent):
    """One stored item: its pickle and when it was put."""

    def __init__(self, data: bytes, put_at: float) -> None:
        self.data = data
        self.put_at = put_at
        self.attempts = 0


class QueueRecord(Persistent):
    """The stored state of one named queue."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: Any = PriorityEntryTree() if kind == "priority" else EntryTree()
        self.length = Length()
        self.seq_reserved = 0

    def reserve_seq(self, seq: int) -> None:
        """Make sure no later session hands out ``seq`` again."""
        if seq >= self.seq_reserved:
            self.seq_reserved = seq + SEQ_BLOCK


def queues_of(root: Any, create: bool) -> Any:
    """The mapping of queue names to records in a database root (None if absent)."""
    queues = root.get(ROOT_KEY)
    if queues is None and create:
        queues = root[ROOT_KEY] = OOBTree()
    return queues
