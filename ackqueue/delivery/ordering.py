"""The delivery order of the three queue kinds: how an entry's stored key is made.

The entries tree is sorted by key, so the key is the order: ``(priority << SEQ_BITS) | seq``
for FIFO, the sequence number counting down for LIFO, and ``(item, seq)`` for a priority
queue, whose items order themselves. This is the only thing the kinds change: each kind is
one :class:`Ordering` that the queue is given.

Sequence numbers are the part of an entry's key that keeps put order within a priority. A
single process counts on from the block reserved in the queue record at open; in shared mode
each process draws them from short-lived blocks reserved in the shared record, so that two
processes never number two items alike (see each mode's ``next_seq``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ackqueue.errors import AckQueueError
from ackqueue.records import SEQ_BITS, SEQ_MASK

# The ready head, for a priority queue to compare a new item with (None when nothing is ready).
Head = Callable[[], Any]


class Ordering:
    """FIFO within a priority (``put(priority=)``, lower first)."""

    kind = "fifo"

    def check_priority(self, priority: object) -> None:
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(
                f"priority must be an int (lower is delivered first), not "
                f"{type(priority).__name__} {priority!r}"
            )
        if not -PRIORITY_LIMIT <= priority < PRIORITY_LIMIT:
            raise ValueError(f"priority must be in [{-PRIORITY_LIMIT}, {PRIORITY_LIMIT})")

    def make_key(self, seq: int, priority: int, item: Any, head: Head) -> Any:
        """The stored key of a new entry: its place in the delivery order."""
        return (priority << SEQ_BITS) | seq

    def rekey(self, key: Any, seq: int) -> Any:
        """A new key with ``key``'s priority and a new sequence number (for requeueing)."""
        return (key & ~SEQ_MASK) | seq

    def key_seq(self, key: Any) -> int:
        return int(key & SEQ_MASK)

    @staticmethod
    def key_id(key: Any) -> Any:
        """A hashable id of an entry's key, unique in its queue, for in-memory lookups (a
        static method: the collections holding it must not keep anything else alive)."""
        return key


class LifoOrdering(Ordering):
    """Last in, first out within a priority."""

    kind = "lifo"

    def make_key(self, seq: int, priority: int, item: Any, head: Head) -> Any:
        return (priority << SEQ_BITS) | (SEQ_MASK - seq)

    def rekey(self, key: Any, seq: int) -> Any:
        return (key & ~SEQ_MASK) | (SEQ_MASK - seq)

    def key_seq(self, key: Any) -> int:
        return int(SEQ_MASK - (key & SEQ_MASK))


class PriorityOrdering(Ordering):
    """The smallest item first, equal items in put order."""

    kind = "priority"

    def check_priority(self, priority: object) -> None:
        if priority:
            raise ValueError("PriorityAckQueue orders by the items themselves; omit priority=")

    def make_key(self, seq: int, priority: int, item: Any, head: Head) -> Any:
        key = (item, seq)
        first = head()
        if first is not None:
            key < first  # noqa: B015 - raise TypeError now, before anything is stored
        return key

    def rekey(self, key: Any, seq: int) -> Any:
        return (key[0], seq)

    def key_seq(self, key: Any) -> int:
        return int(key[1])

    @staticmethod
    def key_id(key: Any) -> Any:
        return key[1]  # the item need not be hashable; its sequence number is unique


PRIORITY_LIMIT = 1 << (62 - SEQ_BITS)


def checked_seq(seq: int, name: str) -> int:
    if seq > SEQ_MASK:
        raise AckQueueError(f"queue {name!r} has used up its sequence numbers")
    return seq
