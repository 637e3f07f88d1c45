"""``put(item, priority=n)`` on AckQueue: lower first, FIFO within one priority; PriorityAckQueue
compares the items themselves."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackqueue import AckQueue, LifoAckQueue, PriorityAckQueue


def expected_order(puts: list[tuple[int, int]]) -> list[int]:
    """Items by priority, then put order (Python's sort is stable)."""
    return [item for _prio, item in sorted(puts, key=lambda p: p[0])]


@settings(max_examples=25, deadline=None)
@given(
    priorities=st.lists(st.integers(-3, 3), min_size=1, max_size=30),
    reopen_after=st.integers(0, 30),
)
def test_lower_priority_first_and_fifo_within_a_priority_across_reopen(priorities, reopen_after):
    puts = list(zip(priorities, range(len(priorities)), strict=True))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "q.fs")
        q = AckQueue(path)
        for prio, item in puts[:reopen_after]:
            q.put(item, priority=prio)
        q.close()
        q = AckQueue(path)  # the first part now comes from the stored backlog
        for prio, item in puts[reopen_after:]:
            q.put(item, priority=prio)
        assert [q.get() for _ in puts] == expected_order(puts)
        q.close()


def test_a_nacked_item_keeps_its_place_among_priorities(qpath):
    with AckQueue(qpath) as q:
        q.put("low", priority=5)
        q.put("high", priority=-5)
        q.put("mid")
        c = q.connect()
        high = c.get()
        assert high == "high"
        q.put("higher", priority=-9)
        c.nack(high)
        assert [c.get() for _ in range(4)] == ["higher", "high", "mid", "low"]


def test_batches_and_delays_take_a_priority_too(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["b1", "b2"], priority=1)
        q.put_many(["a1", "a2"], priority=0)
        q.put("urgent", priority=-1)
        assert [q.get() for _ in range(5)] == ["urgent", "a1", "a2", "b1", "b2"]


def test_lifo_queue_puts_lower_priority_first_then_newest_first(qpath):
    with LifoAckQueue(qpath) as q:
        for item, prio in [("a", 1), ("b", 0), ("c", 1), ("d", 0)]:
            q.put(item, priority=prio)
        assert [q.get() for _ in range(4)] == ["d", "b", "c", "a"]


def test_a_priority_queue_refuses_an_item_it_cannot_compare_and_stores_nothing(qpath):
    # As queue.PriorityQueue does at put: TypeError, the queue unchanged.
    with PriorityAckQueue(qpath) as q:
        q.put(1)
        with pytest.raises(TypeError):
            q.put("one")
        assert q.qsize() == q.stored_count() == 1
        q.put(0)
        assert [q.get(), q.get()] == [0, 1]
