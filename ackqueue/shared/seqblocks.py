"""Sequence numbers in shared mode: blocks reserved in the shared queue record.

Several processes put into one queue, so none may count on from a number only it knows: each
reserves a block of numbers in the stored record (one commit) and numbers its puts from it, for
at most :data:`SEQ_BLOCK` puts or :data:`SEQ_BLOCK_SECONDS`, whichever ends first, so that items
put by different processes at about the same time stay close to put order.
"""

from __future__ import annotations

import time

from ackqueue.delivery.ordering import checked_seq
from ackqueue.storage.book import Book

SEQ_BLOCK = 64
SEQ_BLOCK_SECONDS = 1.0


class SeqBlocks:
    """The block of sequence numbers this process draws from, for one queue."""

    def __init__(self, book: Book) -> None:
        self._book = book
        self._next = 0
        self._end = 0
        self._until = 0.0

    def next_locked(self) -> int:
        """The next number (the caller serialises calls: the queue's mutex)."""
        if self._next >= self._end or time.monotonic() > self._until:
            start = self._book.store.run(self._book.seq_reserver(SEQ_BLOCK))
            self._next, self._end = start, start + SEQ_BLOCK
            self._until = time.monotonic() + SEQ_BLOCK_SECONDS
        seq = self._next
        self._next += 1
        return checked_seq(seq, self._book.name)
