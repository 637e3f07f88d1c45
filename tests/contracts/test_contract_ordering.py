"""Ordering, the same on every implementation: FIFO, LIFO, priority items and
``put(priority=)``; a given-back item keeps its place; a plain ``get`` takes the item for good.

In shared mode these hold as docs/howto/scaling.rst promises them for one
consumer in one process: items come out in key order, and one process's puts keep put order.
"""

from __future__ import annotations

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT, settled

import ackqueue


def test_fifo_hands_items_out_in_put_order_equal_items_included(queues) -> None:
    q = queues()
    q.put_many(["a", "b"])
    for item in ["c", 5, 5, {"d": [1]}]:
        q.put(item)
    with q.connect() as c:
        assert drain(c) == ["a", "b", "c", 5, 5, {"d": [1]}]
        settled(q, ready=0, held=6)


def test_lifo_hands_the_newest_item_out_first(queues) -> None:
    q = queues(ackqueue.LifoAckQueue)
    q.put_many([1, 2])
    q.put(3)
    with q.connect() as c:
        assert c.get_nowait() == 3
        q.put(4)
        assert drain(c) == [4, 2, 1]


def test_priority_queue_orders_by_the_items_which_need_not_be_hashable(queues) -> None:
    q = queues(ackqueue.PriorityAckQueue)
    ordered = [(1, "x", {"url": "/a"}), (1, "y", {"url": "/b"}), (2, ["b"]), (3, {"url": "/c"})]
    for i in (3, 1, 2, 0):
        q.put(ordered[i])
    with q.connect() as c:
        assert drain(c) == ordered


def test_put_priority_lower_first_and_fifo_within_a_priority(queues) -> None:
    q = queues()
    q.put("routine 1", priority=5)
    q.put("urgent 1", priority=0)
    q.put("routine 2", priority=5)
    q.put_many(["urgent 2", "urgent 3"], priority=0)
    q.put("default")
    with q.connect() as c:
        assert drain(c) == ["urgent 1", "urgent 2", "urgent 3", "default", "routine 1", "routine 2"]


def test_a_nacked_item_goes_back_to_its_place(queues) -> None:
    q = queues()
    q.put_many(["a", "b", "c"])
    with q.connect() as c:
        a, b = c.get_nowait(), c.get_nowait()
        c.nack(b)
        c.nack(a)
        assert drain(c) == ["a", "b", "c"]


def test_plain_get_takes_the_item_for_good(queues) -> None:
    q = queues()
    q.put_many(["gone", "stays"])
    assert q.get_nowait() == "gone"
    settled(q, ready=1, held=0)
    with q.connect() as c:
        assert drain(c) == ["stays"]


# The same items in delivery order for each kind of queue, and the order they are put in.
KINDS = {
    "fifo": (ackqueue.AckQueue, ["a", {"b": 1}, "c"], [0, 1, 2]),
    "lifo": (ackqueue.LifoAckQueue, ["c", {"b": 1}, "a"], [2, 1, 0]),
    "priority": (ackqueue.PriorityAckQueue, [(1, {"a": 1}), (2, ["b"]), (3, "c")], [2, 0, 1]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_gives_nacked_and_delayed_items_back_in_their_place(queues, kind) -> None:
    cls, ordered, put_order = KINDS[kind]
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(cls, clock=clock, max_attempts=5)
    for i in put_order:
        q.put(ordered[i])
    with q.connect() as c:
        first, second = c.get_nowait(), c.get_nowait()
        assert [first, second] == ordered[:2]
        c.nack(second, delay=10)
        c.nack(first)
        assert drain(c) == [ordered[0], ordered[2]]
        clock.advance(10)
        again = c.get(timeout=GIVE_BACK_TIMEOUT)
        assert again == ordered[1] and c.deliveries()[-1].attempts == 2
        c.reject(again, reason="dead")
    [letter] = q.dead_letters()
    assert (letter.item, letter.attempts) == (ordered[1], 2)
    q.requeue_dead()
    settled(q, ready=3, held=0, dead=0)
