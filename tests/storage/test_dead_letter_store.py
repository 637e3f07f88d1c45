"""The dead letters as stored (storage/deadletters.py and the book's requeue and purge): what
each letter records, ids never reused, counts that follow every move, keys and groups.

Fast enough for the mutation run's fast tests: one file queue each, no children."""

from __future__ import annotations

import queue

import pytest

from ackqueue import AckQueue, ItemLoadError, UnloadableItem


class Clock:
    """The queue's clock (``clock=``), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_dead_letter_records_the_item_its_attempts_reason_and_times(qpath):
    clock = Clock()
    with AckQueue(qpath, clock=clock, max_attempts=2) as q:
        q.put({"url": "a"})
        clock.now = 1010.0
        q.put("poison")
        c = q.connect()
        clock.now = 1020.0
        c.reject(c.get(), reason="404")
        for _ in range(2):
            clock.now += 5
            c.nack(c.get())  # the second nack is its last attempt: it is buried
        assert q.qsize() == 0 and q.dead_count() == 2
    with AckQueue(qpath, clock=clock) as q:
        first, second = q.dead_letters()
    assert (first.item, first.attempts, first.reason) == ({"url": "a"}, 1, "404")
    assert (first.put_at, first.when) == (1000.0, 1020.0)
    assert (second.item, second.attempts) == ("poison", 2)
    assert "max_attempts" in second.reason
    assert (second.put_at, second.when) == (1010.0, 1030.0)
    assert second.id > first.id >= 1


def test_dead_letter_ids_are_never_reused_after_a_purge_or_a_reopen(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        c.reject(c.get())
        c.reject(c.get())
        ids = [d.id for d in q.dead_letters()]
        assert len(set(ids)) == 2
        assert q.purge_dead() == 2
        q.put("c")
        c.reject(c.get())
        [later] = q.dead_letters()
        assert later.id > max(ids)
    with AckQueue(qpath) as q, q.connect() as c:
        q.put("d")
        c.reject(c.get())
        assert [d.id for d in q.dead_letters()] == [later.id, later.id + 1]


def test_counts_follow_each_move_to_and_from_the_dead_letters_and_survive_a_reopen(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(range(5))
        for _ in range(3):
            c.reject(c.get())
        assert (q.qsize(), q.dead_count()) == (2, 3)
        ids = [d.id for d in q.dead_letters()]
        assert q.requeue_dead([ids[0], ids[0]]) == 1  # twice named, moved once
        assert (q.qsize(), q.dead_count()) == (3, 2)
        assert q.purge_dead([ids[1], ids[1], 12345]) == 1
        assert (q.qsize(), q.dead_count()) == (3, 1)
    with AckQueue(qpath) as q:
        assert (q.qsize(), q.dead_count()) == (3, 1)
        assert [d.item for d in q.dead_letters()] == [2]
        assert [q.get_nowait() for _ in range(3)] == [3, 4, 0]  # requeued go to the end


def test_a_dead_letter_gives_up_its_key_and_comes_back_without_it(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        assert q.put("first", key="k") is True
        c.reject(c.get())
        assert not q.seen("k")
        assert q.put("second", key="k") is True  # the key is free again
        assert q.requeue_dead() == 1  # comes back without a key: no clash with "second"
        assert sorted(q.get_nowait() for _ in range(2)) == ["first", "second"]


def test_a_requeued_dead_letter_keeps_its_group(qpath):
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        q.put("a", group="g")
        q.put("b", group="g")
        a = c.get()
        assert a == "a"
        c.reject(a)
        b = c.get()
        assert b == "b"  # held: group g is at its limit
        assert q.requeue_dead() == 1
        with pytest.raises(queue.Empty):
            c.get(timeout=0)  # "a" is of group g again, which still holds "b"
        c.ack(b)
        assert c.get(timeout=0) == "a"


def test_a_rejected_item_records_its_deliveries_counted_in_memory(qpath):
    """Without ``max_attempts`` attempts are counted in memory only (nothing stored per
    get): the dead letter records those, not the stored count."""
    with AckQueue(qpath) as q, q.connect() as c:
        q.put("x")
        c.nack(c.get())
        c.nack(c.get())
        c.reject(c.get(), reason="enough")
        [letter] = q.dead_letters()
        assert (letter.attempts, letter.reason) == (3, "enough")


def test_an_unloadable_item_is_buried_with_its_bytes_and_stored_attempts(qpath, vanishing_class):
    module, remove = vanishing_class
    with AckQueue(qpath, max_attempts=5) as q, q.connect() as c:
        q.put(module.Gone())
        c.nack(c.get())  # one stored attempt
        q.put("after")
    remove()
    with AckQueue(qpath, max_attempts=5) as q, q.connect() as c:
        with pytest.raises(ItemLoadError):
            c.get()
        assert c.get() == "after"
        [letter] = q.dead_letters()
    assert isinstance(letter.item, UnloadableItem)
    assert letter.attempts == 1  # the stored count: this get never delivered it
    assert module.__name__.encode() in letter.item.data  # the record's own bytes, kept
    assert letter.item.error.startswith(f"cannot load dead letter {letter.id}")
    assert module.__name__ in letter.item.error
    assert f"{module.__name__}.Gone" in letter.reason and letter.when > 0
