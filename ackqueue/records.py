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
    """One stored item: its pickle, when it was put, deliveries so far, and when it is due.

    ``not_before`` (epoch seconds, 0 = at once) is a class default so that entries written
    before delays existed still load.
    """

    not_before = 0.0
    group: str | None = None  # put(group=): a class default, so older entries have none
    # Put by key (storage/keys.py): the key as indexed, and for how many seconds to
    # remember it once the item is done (None: not at all; math.inf: forever).
    item_key: bytes | None = None
    remember: float | None = None
    # Shared mode: acked, waiting for the sweeper to delete it (see ackqueue/shared/sweeping.py).
    # An ack that only marks its own entry writes no tree bucket, so it conflicts with nothing.
    done = False

    def __init__(
        self, data: bytes, put_at: float, not_before: float = 0.0, group: str | None = None
    ) -> None:
        self.data = data
        self.put_at = put_at
        self.attempts = 0
        if not_before:
            self.not_before = not_before
        if group is not None:
            self.group = group


class DeadRecord(Persistent):
    """A dead letter: an item taken out of delivery, with why and when."""

    group: str | None = None  # its entry's group, for requeue_dead (a class default)

    def __init__(
        self, key: Any, data: bytes, put_at: float, attempts: int, reason: str, when: float
    ) -> None:
        self.key = key
        self.data = data
        self.put_at = put_at
        self.attempts = attempts
        self.reason = reason
        self.when = when


class QueueRecord(Persistent):
    """The stored state of one named queue.

    The dead letters and the index of delayed entries are made when first needed; their class
    defaults (None) let records written before they existed open unchanged.
    """

    dead: Any = None  # LOBTree: dead-letter id -> DeadRecord
    dead_length: Any = None  # BTrees.Length of ``dead``
    dead_next = 0
    delayed: Any = None  # entry key -> not_before, for every entry stored with a delay
    # True while a process keeps the count in transaction metadata instead of ``length``:
    # read the count with ``counts.stored_count`` (see counts.py).
    counted_in_log = False
    paused = False  # while True no item is handed out, in any process (q.pause()); puts go on
    grouped = False  # True once an entry was put with a group: the ready index must know them
    group_pauses: Any = None  # OOBTree: group -> paused until (epoch seconds), q.pause_group()
    group_turns: Any = None  # OOBTree: group -> last delivery (shared mode with group rules)
    # OOBTree: group -> (max_held, interval), None for the queue's option; q.set_group()
    group_settings: Any = None
    keyed: Any = None  # OOBTree: indexed key -> entry key, for every live item put by key
    seen: Any = None  # OOBTree: indexed key -> until when it is remembered (math.inf: forever)
    # True once shared mode may have left entries marked ``done``: the next single-process open
    # deletes them before it reads the backlog (sweep_done in storage/book.py).
    done_marks = False

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: Any = PriorityEntryTree() if kind == "priority" else EntryTree()
        self.length = Length()
        self.seq_reserved = 0

    def reserve_seq(self, seq: int) -> None:
        """Make sure no later session hands out ``seq`` again."""
        if seq >= self.seq_reserved:
            self.seq_reserved = seq + SEQ_BLOCK

    def dead_tree(self) -> Any:
        if self.dead is None:
            self.dead = LOBTree()
            self.dead_length = Length()
        return self.dead

    def group_pause_index(self) -> Any:
        if self.group_pauses is None:
            self.group_pauses = OOBTree()
        return self.group_pauses

    def group_setting_index(self) -> Any:
        if self.group_settings is None:
            self.group_settings = OOBTree()
        return self.group_settings

    def group_turn_index(self) -> Any:
        if self.group_turns is None:
            self.group_turns = OOBTree()
        return self.group_turns

    def key_index(self) -> Any:
        if self.keyed is None:
            self.keyed = OOBTree()
        return self.keyed

    def seen_set(self) -> Any:
        if self.seen is None:
            self.seen = OOBTree()
        return self.seen

    def delay_index(self) -> Any:
        if self.delayed is None:
            self.delayed = OOBTree() if self.kind == "priority" else LOBTree()
        return self.delayed


def queues_of(root: Any, create: bool) -> Any:
    """The mapping of queue names to records in a database root (None if absent)."""
    queues = root.get(ROOT_KEY)
    if queues is None and create:
        queues = root[ROOT_KEY] = OOBTree()
    return queues
