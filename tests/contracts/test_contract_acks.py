"""Acknowledgements, the same on every implementation: ``ack`` removes for good, ``nack``
gives back, ``reject`` dead-letters, and settling what this consumer does not hold raises
``NotHeldError`` and changes nothing."""

from __future__ import annotations

import pytest
from conftest import drain
from contracts.implementations import settled

import ackqueue


def test_ack_removes_nack_gives_back_and_reject_dead_letters(queues) -> None:
    q = queues()
    q.put_many(["acked", "nacked", "rejected"])
    with q.connect() as c:
        acked, nacked, rejected = drain(c)
        settled(q, ready=0, held=3)
        c.ack(acked)
        c.nack(nacked)
        c.reject(rejected, reason="cannot parse")
        settled(q, ready=1, held=0, dead=1)
        again = c.get_nowait()
        assert again == "nacked" and c.delivery(again).attempts == 2
        c.ack(again)
    settled(q, ready=0, held=0)
    assert [(d.item, d.reason) for d in q.dead_letters()] == [("rejected", "cannot parse")]


def test_two_held_equal_items_are_settled_one_at_a_time(queues) -> None:
    q = queues()
    q.put_many([5, 5])
    with q.connect() as c:
        first, second = c.get_nowait(), c.get_nowait()
        c.ack(second)
        assert q.unacked_count() == 1
        c.nack(first)
        settled(q, ready=1, held=0)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack(first)
        assert drain(c) == [5]


def test_settling_by_delivery_id(queues) -> None:
    q = queues()
    q.put_many(["a", "b"])
    with q.connect() as c:
        a, b = c.get_nowait(), c.get_nowait()
        ids = [d.id for d in c.deliveries()]
        assert [d.item for d in c.deliveries()] == ["a", "b"] and len(set(ids)) == 2
        c.nack_id(c.delivery(a).id)
        c.ack_id(c.delivery(b).id)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack_id(ids[1])
        assert drain(c) == ["a"]


def test_settling_what_is_not_held_raises_and_changes_nothing(queues) -> None:
    q = queues()
    q.put_many(["mine", "theirs", "ready"])
    mine_c, their_c = q.connect(), q.connect()
    mine = mine_c.get_nowait()
    theirs = their_c.get_nowait()
    acked = mine
    mine_c.ack(acked)
    for settle in (mine_c.ack, mine_c.nack, mine_c.reject):
        for stranger in ("never got", theirs, acked, "ready"):
            with pytest.raises(ackqueue.NotHeldError):
                settle(stranger)
    assert issubclass(ackqueue.NotHeldError, ValueError)
    settled(q, ready=1, held=1, dead=0)
    their_c.ack(theirs)  # still held by the other consumer, untouched by the attempts
    mine_c.close()
    their_c.close()
    with q.connect() as c:
        assert drain(c) == ["ready"]


def test_after_close_a_consumer_holds_nothing(queues) -> None:
    q = queues()
    q.put("x")
    c = q.connect()
    x = c.get_nowait()
    c.close()
    with pytest.raises(ackqueue.NotHeldError):
        c.ack(x)
    settled(q, ready=1, held=0)
