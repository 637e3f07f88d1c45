"""Closing a consumer or its queue from another thread wakes the gets blocked on it.

A get blocked without a timeout must not sleep on after its consumer is closed: it raises
QueueClosedError at once, and nothing ends up held by the closed consumer (what it would have
got stays ready for the others). A closed queue says so and refuses work; closing it again
does nothing.
"""

from __future__ import annotations

import threading

import pytest
from polling import wait_for_waiter, wait_until

import ackqueue
from ackqueue import QueueClosedError

CALLS = {
    "get": lambda c: c.get(),
    "get_many": lambda c: c.get_many(3),
}


def blocked(call, target) -> tuple[threading.Thread, list[object]]:
    """Run ``call(target)`` in a thread; its outcome (value or exception type) lands in a list."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call(target))
        except Exception as exc:
            outcome.append(type(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.fixture(params=[False, True], ids=["local", "shared"])
def shared(request) -> bool:
    return request.param


@pytest.mark.parametrize("call", sorted(CALLS))
def test_closing_a_consumer_wakes_its_blocked_get_and_leaves_nothing_held(qpath, call, shared):
    with ackqueue.AckQueue(qpath, shared=shared) as q:
        consumer: list[ackqueue.Consumer] = []
        connected = threading.Event()

        def run(_: object) -> object:
            c = q.connect()  # connected in the blocked thread, as a worker would
            consumer.append(c)
            connected.set()
            return CALLS[call](c)

        thread, outcome = blocked(run, None)
        assert connected.wait(5)
        wait_for_waiter(q.not_empty)
        consumer[0].close()
        thread.join(5)
        assert not thread.is_alive(), "the blocked get did not wake when its consumer closed"
        assert outcome == [QueueClosedError]
        # Nothing was taken by the closed consumer: a later put goes to the next getter.
        q.put("next")
        assert q.unacked_count() == 0
        with q.connect() as other:
            assert other.get(timeout=5) == "next"


def test_closing_one_consumer_leaves_the_other_blocked_gets_waiting(qpath):
    with ackqueue.AckQueue(qpath) as q:
        first, second = q.connect(), q.connect()
        t1, out1 = blocked(CALLS["get"], first)
        t2, out2 = blocked(CALLS["get"], second)
        wait_until(lambda: len(q.not_empty._waiters) == 2, what="two blocked gets")  # type: ignore[attr-defined]
        first.close()
        t1.join(5)
        assert out1 == [QueueClosedError]
        assert t2.is_alive() and out2 == []
        q.put("for the second")
        t2.join(5)
        assert out2 == ["for the second"]
        # The thread that got with ``second`` has ended without an ack: its end gives the
        # item back, as if it had connected the consumer itself.
        wait_until(lambda: (q.qsize(), q.unacked_count()) == (1, 0), what="the item back")
        second.close()
        assert q.qsize() == 1


@pytest.mark.parametrize("call", sorted(CALLS))
def test_closing_the_queue_wakes_blocked_consumer_gets(qpath, call, shared):
    q = ackqueue.AckQueue(qpath, shared=shared)
    c = q.connect()
    thread, outcome = blocked(CALLS[call], c)
    wait_for_waiter(q.not_empty)
    q.close()
    thread.join(5)
    assert not thread.is_alive()
    assert outcome == [QueueClosedError]
    # Shared: the file's server outlives the queue for a while; open it as the queue did.
    with ackqueue.AckQueue(qpath, shared=shared) as again:
        assert again.qsize() == 0


GIVE_BACK = {
    "nack": lambda c, item: c.nack(item),
    "close": lambda c, item: c.close(),
}


@pytest.mark.parametrize("how", sorted(GIVE_BACK))
def test_an_item_given_back_wakes_a_get_blocked_on_the_queue(qpath, how):
    with ackqueue.AckQueue(qpath) as q:
        q.put("only")
        holder = q.connect()
        item = holder.get()
        waiter = q.connect()
        thread, outcome = blocked(CALLS["get"], waiter)
        wait_for_waiter(q.not_empty)
        GIVE_BACK[how](holder, item)
        thread.join(5)
        assert outcome == ["only"], "the blocked get did not wake when the item came back"
        waiter.close()


def test_a_closed_queue_says_so_and_a_second_close_changes_nothing(qpath):
    with ackqueue.AckQueue(qpath, name="other") as other:
        q = ackqueue.AckQueue(qpath)
        q.put("kept")
        c = q.connect()
        assert c.get() == "kept"
        q.close()
        assert q.closed
        with pytest.raises(QueueClosedError, match="queue 'default' is closed"):
            q.put("refused")
        with pytest.raises(QueueClosedError, match="queue 'default' is closed"):
            q.get_nowait()
        q.close()
        other.put("still open")  # the file stays open for the other queue on it
        assert other.get_nowait() == "still open"
    with ackqueue.AckQueue(qpath) as again:
        assert again.get_nowait() == "kept"  # given back by the close
