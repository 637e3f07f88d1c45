"""Delayed delivery, the same on every implementation, on a manual clock: ``put(delay=)``,
``put(not_before=)`` and ``nack(delay=)`` keep an item back until it is due, and a get blocked
before then has it once it is."""

from __future__ import annotations

import threading

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT, settled

import ackqueue


def test_a_delayed_item_is_not_handed_out_before_it_is_due(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock)
    q.put("later", delay=60)
    q.put("at once")
    q.put("absolute", not_before=clock() + 30)
    assert q.delayed_count() == 2
    settled(q, ready=1, held=0)
    with q.connect() as c:
        assert drain(c) == ["at once"]
        clock.advance(29.9)
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        clock.advance(0.1)
        assert c.get(timeout=GIVE_BACK_TIMEOUT) == "absolute"
        clock.advance(30)
        assert c.get(timeout=GIVE_BACK_TIMEOUT) == "later"
        assert q.delayed_count() == 0


def test_nack_with_delay_retries_later_and_keeps_the_attempt_count(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock, max_attempts=5)
    q.put("retry me")
    with q.connect() as c:
        c.nack(c.get_nowait(), delay=10)
        assert q.delayed_count() == 1
        settled(q, ready=0, held=0)
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        clock.advance(10)
        again = c.get(timeout=GIVE_BACK_TIMEOUT)
        assert again == "retry me" and c.delivery(again).attempts == 2
        c.ack(again)
        assert q.delayed_count() == 0


def test_a_get_blocked_before_the_item_is_due_has_it_once_it_is(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock)
    q.put("soon", delay=5)
    got: list[object] = []
    blocked = threading.Event()

    def consume() -> None:
        with q.connect() as c:
            blocked.set()
            got.append(c.get(timeout=GIVE_BACK_TIMEOUT))
            c.ack(got[-1])

    t = threading.Thread(target=consume)
    t.start()
    assert blocked.wait(GIVE_BACK_TIMEOUT)
    clock.advance(5)
    t.join(GIVE_BACK_TIMEOUT)
    assert got == ["soon"]
