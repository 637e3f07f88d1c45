"""Sequence numbers: the part of an entry's key that keeps put order within a priority.

A single process counts on from the block reserved in the queue record at open; in shared mode
(:mod:`ackqueue.shared`) each process draws them from short-lived blocks reserved in the shared
record, so that two processes never number two items alike.
"""

from __future__ import annotations

from typing import Any

from ackqueue.errors import AckQueueError

SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
PRIORITY_LIMIT = 1 << (62 - SEQ_BITS)


class SeqMixin:
    def _alloc_seq(self: Any) -> int:
        """The next sequence number (the caller holds the queue's mutex)."""
        if self._shared is not None:
            seq: int = self._shared.next_seq()
        else:
            seq = self._next_seq
            self._next_seq += 1
        if seq > SEQ_MASK:
            raise AckQueueError(f"queue {self.name!r} has used up its sequence numbers")
        return seq
