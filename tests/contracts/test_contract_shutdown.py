"""``shutdown()``, Python 3.13's ``queue.Queue.shutdown``, the same on every implementation:
graceful refuses puts and drains what is ready; immediate stops at once, gives held items back
and keeps every item stored for the next start; both wake blocked callers."""

from __future__ import annotations

import threading

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT, settled
from polling import wait_for_waiter

import ackqueue


def test_graceful_shutdown_refuses_puts_and_drains_what_is_ready(queues) -> None:
    q = queues()
    q.put_many([1, 2])
    c = q.connect()
    held = c.get_nowait()
    q.shutdown()
    assert q.is_shutdown
    with pytest.raises(ackqueue.ShutDown):
        q.put(3)
    with pytest.raises(ackqueue.ShutDown):
        q.put_many([3])
    assert q.get_nowait() == 2
    with pytest.raises(ackqueue.ShutDown):
        q.get(timeout=GIVE_BACK_TIMEOUT)  # nothing ready: raises instead of blocking
    c.nack(held)  # settling what is held still works
    again = c.get_nowait()
    assert again == 1
    c.ack(again)
    with pytest.raises(ackqueue.ShutDown):
        c.get(timeout=GIVE_BACK_TIMEOUT)
    c.close()
    settled(q, ready=0, held=0)


def test_immediate_shutdown_gives_held_items_back_and_keeps_every_item(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(name="stopped", clock=clock)
    q.put_many(["ready1", "ready2", "held"])
    q.put("delayed", delay=3600)
    c = q.connect()
    assert [c.get_nowait(), c.get_nowait()] == ["ready1", "ready2"]
    q.shutdown(immediate=True)
    with pytest.raises(ackqueue.ShutDown):
        q.get_nowait()
    with pytest.raises(ackqueue.NotHeldError):
        c.ack("ready1")  # held ones went back
    q.join()  # returns: nothing is in progress any more
    assert q.unacked_count() == 0
    q.close()
    if not queues.reopens:
        return
    q = queues(name="stopped", clock=clock)
    settled(q, ready=3, held=0)
    assert q.delayed_count() == 1
    with q.connect() as c:
        assert drain(c) == ["ready1", "ready2", "held"]


def test_shutdown_wakes_a_blocked_get_and_a_blocked_put(queues) -> None:
    full, empty = queues(name="full", maxsize=1), queues(name="empty")
    full.put("full")
    outcomes: list[str] = []

    def blocked(call, outcome: str) -> None:
        try:
            call(timeout=GIVE_BACK_TIMEOUT)
        except ackqueue.ShutDown:
            outcomes.append(outcome)

    threads = [
        threading.Thread(target=blocked, args=(lambda **kw: full.put("never", **kw), "put")),
        threading.Thread(target=blocked, args=(empty.get, "get")),
    ]
    for t in threads:
        t.start()
    wait_for_waiter(full.not_full, GIVE_BACK_TIMEOUT)
    wait_for_waiter(empty.not_empty, GIVE_BACK_TIMEOUT)
    full.shutdown()
    empty.shutdown()
    for t in threads:
        t.join(GIVE_BACK_TIMEOUT)
    assert sorted(outcomes) == ["get", "put"]
