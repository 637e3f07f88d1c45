"""Batches, the same on every implementation: ``put_many``, ``get_many`` and ``ack_many``
keep the order and act on all of the batch or none of it."""

from __future__ import annotations

import pytest
from conftest import drain
from contracts.implementations import settled

import ackqueue


def test_batches_keep_the_order_and_ack_many_settles_them(queues) -> None:
    q = queues()
    q.put_many(range(10))
    settled(q, ready=10, held=0)
    with q.connect() as c:
        first = c.get_many(4)
        assert first == [0, 1, 2, 3]
        assert c.get_many(100) == [4, 5, 6, 7, 8, 9]  # fewer than asked: what is ready
        c.ack_many(first)
        settled(q, ready=0, held=6)
        with pytest.raises(ackqueue.Empty):
            c.get_many(10, block=False)
    settled(q, ready=6, held=0)


def test_ack_many_with_one_item_not_held_acks_none(queues) -> None:
    q = queues()
    q.put_many([5, 5, 7])
    with q.connect() as c:
        a, b, seven = c.get_many(3)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack_many([a, b, "stranger"])
        with pytest.raises(ackqueue.NotHeldError):
            c.ack_many([a, a, a])  # two 5s are held, not three
        assert q.unacked_count() == 3
        c.ack_many([a, a])
        assert [d.item for d in c.deliveries()] == [7]
        c.nack(seven)
        assert drain(c) == [7]


def test_a_put_many_with_an_unpicklable_item_stores_none_of_it(queues) -> None:
    q = queues()
    with pytest.raises(TypeError):
        q.put_many(["fine", lambda: None, "also fine"])
    q.put("after")
    settled(q, ready=1, held=0)
    with q.connect() as c:
        assert drain(c) == ["after"]
