"""The book's stored edits (storage/book.py) as the public API shows them, checked after a
reopen where what matters is what the file holds: empty id lists, pauses and group settings,
removing a group, snoozes and nacks that rewrite an item.

Fast enough for the mutation run's fast tests: one file queue each, no children."""

from __future__ import annotations

import queue

import pytest
import ZODB

from ackqueue import (
    AckQueue,
    DamagedFileError,
    LifoAckQueue,
    NotAQueueFileError,
    SerializerMismatchError,
)
from ackqueue.records import ROOT_KEY
from ackqueue.storage.book import chunks


class Clock:
    """The queue's clock (``clock=``), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drained(q: AckQueue) -> list[object]:
    got = []
    while True:
        try:
            got.append(q.get_nowait())
        except queue.Empty:
            return got


def test_empty_id_lists_requeue_and_purge_nothing(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        c.reject(c.get())
        c.reject(c.get())
        assert q.requeue_dead([]) == 0
        assert q.purge_dead([]) == 0
        assert q.purge_dead(iter([])) == 0
        assert q.dead_count() == 2 and q.qsize() == 0
        ids = [d.id for d in q.dead_letters()]
        assert q.purge_dead(iter(ids[:1])) == 1  # any iterable of ids
        assert [d.item for d in q.dead_letters()] == ["b"]


def test_a_pause_is_stored_and_so_is_its_end(qpath):
    with AckQueue(qpath) as q:
        q.put("x")
        q.pause()
        q.pause()  # twice: still paused, nothing else changes
    with AckQueue(qpath) as q:
        assert q.paused
        q.resume()
    with AckQueue(qpath) as q:
        assert not q.paused
        assert q.get_nowait() == "x"


def test_group_settings_are_stored_and_cleared(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["g1", "g2"], group="g")
        q.set_group("g", max_held=1)
        q.set_group("g", max_held=1)  # the same again: stored once, still in force
    with AckQueue(qpath) as q, q.connect() as c:
        first = c.get()
        with pytest.raises(queue.Empty):
            c.get(timeout=0)  # g holds one already: its own max_held
        q.set_group("g")  # back to the queue's options (no limit)
        second = c.get(timeout=0)
        assert [first, second] == ["g1", "g2"]
        c.nack(first)
        c.nack(second)
    with AckQueue(qpath) as q, q.connect() as c:
        assert [c.get(timeout=0), c.get(timeout=0)] == ["g1", "g2"]  # cleared for good


def test_a_group_pause_is_stored_until_it_ends_or_is_lifted(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock) as q:
        q.put("g1", group="g")
        q.put("h1", group="h")
        q.pause_group("g", 60)
    with AckQueue(qpath, clock=clock) as q:
        assert drained(q) == ["h1"]
        q.pause_group("g", 0)  # lifted
    with AckQueue(qpath, clock=clock) as q:
        assert drained(q) == ["g1"]


def test_removing_a_group_takes_only_its_waiting_items(qpath):
    with AckQueue(qpath, unique="forever") as q, q.connect() as c:
        q.put("a", group="g", key="ka")
        q.put("b", group="g", key="kb")
        q.put("other", group="h", key="kh")
        q.put("c", group="g", key="kc")
        held = c.get()
        assert held == "a"
        assert q.remove_group("g") == 2  # "b" and "c"; "a" is held and stays held
        assert q.remove_group("nobody") == 0
        assert q.qsize() == 1 and q.stored_count() == 2  # "other", and the held "a"
        c.ack(held)
        assert q.seen("ka")  # acked with a seen-set: remembered
    with AckQueue(qpath, unique="forever") as q:
        assert q.qsize() == 1
        assert drained(q) == ["other"]
        assert q.seen("ka") and q.seen("kh")


def test_a_removed_groups_keys_are_free_not_seen(qpath):
    # docs/howto/crawler.rst: a removed item only frees its key. In one process remove_group
    # deleted through Book.deleter as if the items had been handed out, so their keys went to
    # the seen-set and a later put by key was refused.
    with AckQueue(qpath, unique="forever") as q:
        q.put("b", group="g", key="kb")
        assert q.remove_group("g") == 1
        assert not q.seen("kb")
        assert q.put("b again", key="kb") is True


def test_a_snooze_gives_back_its_attempt_and_a_nack_can_rewrite_the_item(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock, max_attempts=2) as q, q.connect() as c:
        q.put("job")
        item = c.get()
        assert c.delivery(item).attempts == 1
        c.snooze(item, 10)
        assert q.delayed_count() == 1
        with pytest.raises(queue.Empty):
            c.get(timeout=0)
    clock.now += 10  # the stored due time has come: due at the next open
    with AckQueue(qpath, clock=clock, max_attempts=2) as q, q.connect() as c:
        item = c.get(timeout=0)
        assert c.delivery(item).attempts == 1  # the snoozed delivery did not count
        c.nack(item, replace="job v2")
        item = c.get(timeout=0)
        assert item == "job v2" and c.delivery(item).attempts == 2
    with AckQueue(qpath, clock=clock, max_attempts=2) as q, q.connect() as c:
        with pytest.raises(queue.Empty):
            c.get(timeout=0)  # its two attempts were spent: buried at this get
        assert [d.item for d in q.dead_letters()] == ["job v2"]


def test_a_nack_with_delay_stores_its_due_time_and_new_item(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock) as q, q.connect() as c:
        q.put_many(["first", "second"])
        c.nack(c.get(), delay=30, replace="first v2")
        assert q.delayed_count() == 1
    with AckQueue(qpath, clock=clock) as q:
        assert (q.qsize(), q.delayed_count()) == (1, 1)
    clock.now += 30
    with AckQueue(qpath, clock=clock) as q:
        assert drained(q) == ["first v2", "second"]  # given back in its place


def test_a_fresh_queue_lists_no_dead_letters(qpath):
    with AckQueue(qpath) as q:
        assert q.dead_letters() == [] and q.dead_count() == 0
        assert q.requeue_dead() == 0 and q.purge_dead() == 0


def test_an_acked_keyed_items_key_is_free_again(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        assert q.put("x", key="k") is True
        assert q.put("x twice", key="k") is False  # live: refused
        c.ack(c.get())
        assert q.put("y", key="k") is True  # no seen-set: the key is free


def test_a_requeued_dead_letter_keeps_its_group_and_put_time_after_a_reopen(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock, max_held_per_group=1) as q, q.connect() as c:
        q.put("a", group="g")
        clock.now += 10
        q.put("b", group="g")
        c.reject(c.get())
        assert q.requeue_dead() == 1
    with AckQueue(qpath, clock=clock, max_held_per_group=1) as q, q.connect() as c:
        b = c.get()
        assert b == "b"
        with pytest.raises(queue.Empty):
            c.get(timeout=0)  # "a" is still of group g, which holds "b"
        c.ack(b)
        a = c.get(timeout=0)
        c.reject(a)
        [letter] = q.dead_letters()
        assert (letter.item, letter.put_at) == ("a", 1000.0)  # its first put's time


def test_grouped_and_plain_entries_and_a_grouped_delay_survive_a_reopen(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock) as q:
        q.put("plain")
        q.put("later", group="g", delay=60)
        q.put("g1", group="g")
    with AckQueue(qpath, clock=clock) as q:
        assert sorted(drained(q)) == ["g1", "plain"]  # "later" is not due
        assert q.delayed_count() == 1
    clock.now += 60
    with AckQueue(qpath, clock=clock) as q:
        assert drained(q) == ["later"]


def test_burial_at_max_attempts_records_its_reason_time_and_attempts(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock, max_attempts=2) as q, q.connect() as c:
        q.put("x")
        c.nack(c.get())  # one stored attempt
        clock.now = 2000.0
    with AckQueue(qpath, clock=clock, max_attempts=1) as q, q.connect() as c:
        with pytest.raises(queue.Empty):
            c.get(timeout=0)  # out of attempts: buried by this get
        [letter] = q.dead_letters()
        assert (letter.attempts, letter.when) == (1, 2000.0)
        assert "max_attempts" in letter.reason


def test_a_snooze_of_an_item_with_no_stored_attempt_stores_none_below_zero(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock) as q, q.connect() as c:  # attempts kept in memory
        q.put("x")
        c.snooze(c.get(), 5)
    clock.now += 5
    with AckQueue(qpath, clock=clock, max_attempts=3) as q, q.connect() as c:
        item = c.get(timeout=0)
        assert c.delivery(item).attempts == 1


def test_the_serializer_is_recorded_with_a_new_queue(qpath):
    with AckQueue(qpath, serializer="json") as q:
        q.put({"a": 1})
    with pytest.raises(SerializerMismatchError, match="json"):
        AckQueue(qpath)
    with AckQueue(qpath, serializer="json") as q:
        assert q.get_nowait() == {"a": 1}


def test_a_queue_of_another_kind_is_refused_naming_both(qpath):
    with AckQueue(qpath) as q:
        q.put(1)
    with pytest.raises(NotAQueueFileError, match="fifo.*LifoAckQueue"):
        LifoAckQueue(qpath)


def test_a_zodb_file_that_is_not_a_queue_file_is_refused_and_left_alone(tmp_path):
    path = str(tmp_path / "other.fs")
    db = ZODB.DB(path)
    with db.transaction() as conn:
        conn.root()["theirs"] = 1
    db.close()
    with pytest.raises(NotAQueueFileError, match="theirs"):
        AckQueue(path)
    db = ZODB.DB(path, read_only=True)
    try:
        assert dict(db.open().root()) == {"theirs": 1}
    finally:
        db.close()


def test_a_root_key_a_byte_off_is_a_damaged_file_not_an_empty_queue(qpath):
    with AckQueue(qpath) as q:
        q.put("kept")
    db = ZODB.DB(qpath)
    with db.transaction() as conn:
        root = conn.root()
        root[ROOT_KEY[:-1] + "?"] = root.pop(ROOT_KEY)
    db.close()
    with pytest.raises(DamagedFileError, match="a byte|names"):
        AckQueue(qpath)


def test_a_chunk_of_entries_prefetches_only_those_not_loaded_yet(qpath) -> None:
    """Reading entries a chunk at a time asks the storage to load a chunk's records in one
    go (over ZEO, one round trip for them all); an entry loaded already needs no load, and
    naming it cost a hand-over to the ZEO client's IO thread all the same, at every look
    past it (shared mode looks from the head after every commit anywhere)."""
    big = [b"x" * 1000 + bytes([n]) for n in range(20)]  # records of their own, not inline
    with AckQueue(qpath) as q:
        q.put_many(big)
        db = q._store.db
        with db.transaction() as conn:
            record = conn.root()[ROOT_KEY][q.name]
            entries = [entry for _, entry in record.entry_items()]
            for entry in entries[:12]:
                entry._p_activate()
            asked: list[object] = []
            prefetch = conn.prefetch

            def observed(*args: object) -> None:
                asked.extend(*args)
                prefetch(*args)

            conn.prefetch = observed  # the connection's own, observed
            read = [pair for chunk in chunks(record.entry_items(), None, 8) for pair in chunk]
            assert [entry for _, entry in read] == entries
            assert [e._p_oid for e in asked] == [e._p_oid for e in entries[12:]]
