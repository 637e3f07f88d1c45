"""Sequence numbers: the part of an entry's key that keeps put order within a priority.

A single process counts on from the block reserved in the queue record at open; in shared mode
each process draws them from short-lived blocks reserved in the shared record, so that two
processes never number two items alike (see each mode's ``next_seq``).
"""

from __future__ import annotations

from ackqueue.errors import AckQueueError

SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
PRIORITY_LIMIT = 1 << (62 - SEQ_BITS)


def checked_seq(seq: int, name: str) -> int:
    if seq > SEQ_MASK:
        raise AckQueueError(f"queue {name!r} has used up its sequence numbers")
    return seq
