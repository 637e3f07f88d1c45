"""The stored side of puts by key (:class:`~ackqueue.storage.keys.KeyBook`) on its own: a Book
over a real Store, no queue object. Each edit decides again inside its commit, so these tests
change the stored state between the snapshot read and the edit, as another thread might."""

from __future__ import annotations

import time

import pytest

import ackqueue
from ackqueue.delivery.ordering import Ordering
from ackqueue.shared.mode import SharedMode
from ackqueue.storage.book import Book
from ackqueue.storage.items import Staged, pickle_item
from ackqueue.storage.keys import KeyBook, Live, NewPut, Revisit
from ackqueue.storage.store import Store

ORDER = Ordering()


@pytest.fixture
def book(qpath):
    store = Store.acquire(qpath, None)
    book = Book(store, "q", "fifo", "AckQueue", SharedMode.keeping)
    yield book
    book.close()
    store.release()


def new_put(seq: int, item: object, key: bytes, remember: float | None = None) -> NewPut:
    staged = Staged(ORDER.make_key(seq, 0, item, lambda: None), seq, pickle_item(item), 0.0)
    return NewPut(staged, key, remember)


def test_a_free_key_admits_one_put_and_a_key_twice_in_one_edit_stores_once(book):
    keys = KeyBook(book, held=lambda entry: None)
    first, twice = new_put(0, "a", b"k"), new_put(1, "b", b"k")
    assert book.store.run(keys.admitter([first, twice], [], now=1.0)) == ([True, False], [])
    assert keys.states([b"k", b"free"], now=1.0) == [Live(first.staged.key, 0.0), False]
    assert book.count() == 1


def test_a_revisit_applies_only_to_the_item_the_snapshot_saw(book):
    keys = KeyBook(book, held=lambda entry: None)
    put = new_put(0, "v1", b"k")
    book.store.run(keys.admitter([put], [], now=1.0))
    live = keys.live(b"k")
    assert live is not None
    stale = Revisit(b"k", Live("another entry", 0.0), pickle_item("lost"), 0.0)
    fresh = Revisit(b"k", live, pickle_item("v2"), 0.0)
    assert book.store.run(keys.admitter([], [stale, fresh], now=2.0)) == ([], [False, True])
    assert book.read(lambda record: [e.data for e in record.entries.values()]) == [
        pickle_item("v2")
    ]


def test_a_held_entry_is_neither_revised_nor_removed(book):
    keys = KeyBook(book, held=lambda entry: "another process")
    book.store.run(keys.admitter([new_put(0, "v1", b"k")], [], now=1.0))
    live = keys.live(b"k")
    assert live is not None
    revisit = Revisit(b"k", live, pickle_item("v2"), 0.0)
    assert book.store.run(keys.admitter([], [revisit], now=2.0)) == ([], [False])
    with pytest.raises(ackqueue.KeyHeldError, match="held by a consumer"):
        book.store.run(keys.remover([live.entry_key], b"k"))
    assert book.count() == 1


def test_remove_frees_the_key_and_a_second_remove_is_an_unknown_key(book):
    keys = KeyBook(book, held=lambda entry: None)
    book.store.run(keys.admitter([new_put(0, "v1", b"k", remember=3600.0)], [], now=1.0))
    live = keys.live(b"k")
    assert live is not None
    assert book.store.run(keys.remover([live.entry_key], b"k")) == [True]
    assert keys.states([b"k"], now=time.time()) == [False]  # removed: freed, not seen
    with pytest.raises(ackqueue.UnknownKeyError):
        book.store.run(keys.remover([live.entry_key], b"k"))


def test_a_done_entry_leaves_its_key_seen_until_it_expires_or_is_forgotten(book):
    keys = KeyBook(book, held=lambda entry: None)
    book.store.run(keys.admitter([new_put(0, "v1", b"k", remember=3600.0)], [], now=1.0))
    live = keys.live(b"k")
    assert live is not None
    book.store.run(book.deleter([live.entry_key], check=True))  # an ack
    now = time.time()
    assert keys.seen(b"k", now) and not keys.seen(b"k", now + 7200)
    assert book.store.run(keys.admitter([new_put(1, "v2", b"k")], [], now=now)) == ([False], [])
    assert book.store.run(keys.forgetter(b"k", now)) is True
    assert book.store.run(keys.forgetter(b"k", now)) is False
    assert book.store.run(keys.admitter([new_put(2, "v3", b"k")], [], now=now)) == ([True], [])
