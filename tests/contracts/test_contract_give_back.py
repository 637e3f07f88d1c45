"""Held items go back, in their place, when the consumer is closed or its thread ends
(normally or by an exception), the same on every implementation.

In shared mode a thread's end is noticed in this process and committed by the session thread
moments later (docs/howto/scaling.rst): see ``take_given_back`` for what that
allows the tests to check.
"""

from __future__ import annotations

import threading

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT, take_given_back
from polling import wait_for_waiter

import ackqueue


def test_closing_a_consumer_gives_back_what_it_holds_in_place(queues) -> None:
    q = queues()
    q.put_many(["a", "b", "c"])
    with q.connect() as c:
        assert [c.get_nowait(), c.get_nowait()] == ["a", "b"]
    with q.connect() as c:
        take_given_back(queues, c, ["a", "b", "c"])
        assert drain(c) == []


def test_items_given_back_by_close_are_ready_when_close_returns(queues) -> None:
    q = queues()
    q.put_many(["a", "b"])
    with q.connect() as c:
        assert c.get_nowait() == "a"
    with q.connect() as c:
        assert c.get_nowait() == "a"
        assert c.get_nowait() == "b"


def test_closing_the_queue_gives_back_what_its_consumers_hold(queues) -> None:
    q = queues(name="closed")
    q.put_many(["a", "b"])
    c = q.connect()
    assert c.get_nowait() == "a"
    q.close()
    if queues.implementation == "memory":
        return  # its database went with it
    q = queues(name="closed")
    with q.connect() as c:
        assert drain(c) == ["a", "b"]


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_thread_that_ends_holding_items_gives_them_back_in_place(
    queues, ending: str, monkeypatch
) -> None:
    q = queues()
    q.put_many(["a", "b", "c"])
    got: list[object] = []

    def worker() -> None:
        c = q.connect()
        got.extend([c.get_nowait(), c.get_nowait()])
        if ending == "raises":
            raise RuntimeError("the worker dies holding two items")

    deaths: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: deaths.append(repr(args.exc_value)))
    t = threading.Thread(target=worker)
    t.start()
    t.join(GIVE_BACK_TIMEOUT)
    assert got == ["a", "b"] and not t.is_alive()
    expected = ["RuntimeError('the worker dies holding two items')"] if ending == "raises" else []
    assert deaths == expected
    with q.connect() as c:
        take_given_back(queues, c, ["a", "b", "c"])
        assert drain(c) == []


def test_closing_a_consumer_from_another_thread_wakes_its_blocked_get(queues) -> None:
    q = queues()
    opened = threading.Event()
    consumers: list[ackqueue.Consumer] = []
    outcome: list[BaseException] = []

    def worker() -> None:
        consumers.append(q.connect())
        opened.set()
        try:
            consumers[0].get(timeout=GIVE_BACK_TIMEOUT)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    assert opened.wait(GIVE_BACK_TIMEOUT)
    wait_for_waiter(q.not_empty, GIVE_BACK_TIMEOUT)
    consumers[0].close()
    t.join(GIVE_BACK_TIMEOUT)
    assert len(outcome) == 1 and isinstance(outcome[0], ackqueue.QueueClosedError)
    q.put("for the others")
    with q.connect() as c:
        assert c.get(timeout=GIVE_BACK_TIMEOUT) == "for the others"
