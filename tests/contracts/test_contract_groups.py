"""Groups and snooze, the same on every implementation: ``max_held_per_group`` caps what one
group has out, a paused group delivers nothing until resumed, ``remove_group`` takes the
waiting items and leaves the held ones, and ``snooze`` gives an item back for later without
spending an attempt.

Shared mode does not rotate between groups (docs/howto/crawler.rst): a get takes the first stored
item whose group may deliver now, so the tests check only what both modes promise.
"""

from __future__ import annotations

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT

import ackqueue


def test_max_held_per_group_caps_what_one_group_has_out(queues) -> None:
    q = queues(max_held_per_group=1)
    q.put_many(["a1", "a2"], group="a")
    q.put("b1", group="b")
    with q.connect() as c:
        a1, b1 = c.get_nowait(), c.get_nowait()
        assert (a1, b1) == ("a1", "b1")  # a2 waits: a1 is out
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        c.ack(a1)
        a2 = c.get(timeout=GIVE_BACK_TIMEOUT)
        assert a2 == "a2"
        c.ack_many([a2, b1])


def test_a_paused_group_delivers_nothing_until_it_is_resumed(queues) -> None:
    q = queues()
    q.put("a1", group="a")
    q.put("b1", group="b")
    q.pause_group("a", 3600)
    with q.connect() as c:
        got = drain(c)
        assert got == ["b1"]
        q.pause_group("a", 0)
        got.append(c.get(timeout=GIVE_BACK_TIMEOUT))
        assert got == ["b1", "a1"]
        c.ack_many(got)


def test_remove_group_takes_the_waiting_items_and_leaves_the_held_ones(queues) -> None:
    q = queues()
    q.put_many(["a1", "a2", "a3"], group="a")
    q.put("b1", group="b")
    with q.connect() as c:
        held = c.get_nowait()
        assert held == "a1"
        assert q.remove_group("a") == 2
        c.ack(held)
    assert drain(q) == ["b1"]


def test_snooze_gives_the_item_back_for_later_without_spending_an_attempt(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(max_attempts=1, clock=clock)
    q.put("rate limited")
    with q.connect() as c:
        item = c.get_nowait()
        c.snooze(item, 30)
        with pytest.raises(ackqueue.NotHeldError):
            c.snooze(item, 30)  # no longer held
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        assert q.delayed_count() == 1
        clock.advance(31)
        again = c.get(timeout=GIVE_BACK_TIMEOUT)  # with max_attempts=1: not a dead letter
        assert again == "rate limited"
        assert c.delivery(again).attempts == 1
        c.ack(again)
    assert q.dead_count() == 0
