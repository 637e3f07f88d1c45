"""The delivery order of the three queue kinds: how an entry's stored key is made.

The entries tree is sorted by key, so the key is the order: ``(priority << SEQ_BITS) | seq``
for FIFO, the sequence number counting down for LIFO, and ``(item, seq)`` for a priority
queue, whose items order themselves. This is the only thing the kinds change.
"""

from __future__ import annotations

from typing import Any

from ackqueue.delivery.seqs import PRIORITY_LIMIT, SEQ_BITS, SEQ_MASK


class FifoOrder:
    def _check_priority(self, priority: int) -> None:
        if not -PRIORITY_LIMIT <= priority < PRIORITY_LIMIT:
            raise ValueError(f"priority must be in [{-PRIORITY_LIMIT}, {PRIORITY_LIMIT})")

    def _make_key(self, seq: int, priority: int, item: Any) -> Any:
        """The stored key of a new entry: its place in the delivery order."""
        return (priority << SEQ_BITS) | seq

    def _rekey(self, key: Any, seq: int) -> Any:
        """A new key with ``key``'s priority and a new sequence number (for requeueing)."""
        return (key & ~SEQ_MASK) | seq

    def _key_seq(self, key: Any) -> int:
        return int(key & SEQ_MASK)

    @staticmethod
    def _key_id(key: Any) -> Any:
        """A hashable id of an entry's key, unique in this queue, for in-memory lookups (a
        static method: the collections holding it must not keep the queue alive)."""
        return key


class LifoOrder(FifoOrder):
    def _make_key(self, seq: int, priority: int, item: Any) -> Any:
        return (priority << SEQ_BITS) | (SEQ_MASK - seq)

    def _rekey(self, key: Any, seq: int) -> Any:
        return (key & ~SEQ_MASK) | (SEQ_MASK - seq)

    def _key_seq(self, key: Any) -> int:
        return int(SEQ_MASK - (key & SEQ_MASK))


class PriorityOrder(FifoOrder):
    def _make_key(self: Any, seq: int, priority: int, item: Any) -> Any:
        if priority:
            raise ValueError("PriorityAckQueue orders by the items themselves; omit priority=")
        key = (item, seq)
        if len(self._ready):
            key < self._ready.peek()  # noqa: B015 - raise TypeError now, before anything is stored
        return key

    def _rekey(self, key: Any, seq: int) -> Any:
        return (key[0], seq)

    def _key_seq(self, key: Any) -> int:
        return int(key[1])

    @staticmethod
    def _key_id(key: Any) -> Any:
        return key[1]  # the item need not be hashable; its sequence number is unique
