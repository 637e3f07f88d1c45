"""Shared mode's sequence numbers (:class:`~ackqueue.shared.mode.SeqBlocks`) on their own:
two processes' blocks over one stored record never number two puts alike, and each counts up."""

from __future__ import annotations

from ackqueue.shared.mode import SEQ_BLOCK, SeqBlocks, SharedMode
from ackqueue.storage.book import Book
from ackqueue.storage.store import Store


def test_two_block_holders_draw_disjoint_increasing_numbers(qpath):
    store = Store.acquire(qpath, None)
    book = Book(store, "q", "fifo", "AckQueue", SharedMode.keeping)
    try:
        first, second = SeqBlocks(book), SeqBlocks(book)  # as two processes would
        a = [first.next_locked() for _ in range(SEQ_BLOCK + 3)]  # past one block
        b = [second.next_locked() for _ in range(5)]
        assert a == sorted(a) and b == sorted(b)
        assert not set(a) & set(b)
        assert len(set(a)) == len(a)
    finally:
        book.close()
        store.release()
