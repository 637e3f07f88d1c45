"""``q.shutdown(immediate=False)`` with Python 3.13's semantics, keeping stored items."""

from __future__ import annotations

import queue
import threading

import pytest
from polling import wait_for_waiter
from semantic_helpers import wait_until

import ackqueue
from ackqueue import AckQueue, NotHeldError, ShutDown


def test_shutdown_error_is_the_standard_librarys_where_it_exists():
    std = getattr(queue, "ShutDown", None)
    if std is not None:
        assert issubclass(ShutDown, std)
    assert issubclass(ShutDown, ackqueue.AckQueueError)


def test_graceful_shutdown_refuses_puts_and_drains_what_is_ready(qpath):
    with AckQueue(qpath) as q:
        q.put_many([1, 2])
        c = q.connect()
        held = c.get()
        q.shutdown()
        assert q.is_shutdown
        with pytest.raises(ShutDown):
            q.put(3)
        with pytest.raises(ShutDown):
            q.put_many([3])
        assert q.get() == 2
        with pytest.raises(ShutDown):
            q.get()  # nothing ready: raises instead of blocking
        c.nack(held)  # acks and nacks of what is held still work
        again = c.get()
        assert again == 1
        c.ack(again)
        assert q.unacked_count() == 0
        with pytest.raises(ShutDown):
            c.get(timeout=1)


def test_shutdown_wakes_blocked_getters_and_putters(qpath):
    with AckQueue(qpath, maxsize=1) as q:
        q.put("full")
        outcomes: list[str] = []

        def blocked_put() -> None:
            try:
                q.put("never", timeout=10)
            except ShutDown:
                outcomes.append("put woke")

        def blocked_get(c_q: AckQueue) -> None:
            try:
                c_q.get(timeout=10)
            except ShutDown:
                outcomes.append("get woke")

        with AckQueue(qpath, name="empty") as empty:
            threads = [
                threading.Thread(target=blocked_put),
                threading.Thread(target=blocked_get, args=(empty,)),
            ]
            for t in threads:
                t.start()
            wait_until(lambda: len(q.not_full._waiters) == 1, what="a blocked put")  # type: ignore[attr-defined]
            wait_until(lambda: len(empty.not_empty._waiters) == 1, what="a blocked get")  # type: ignore[attr-defined]
            q.shutdown()
            empty.shutdown()
            for t in threads:
                t.join(5)
        assert sorted(outcomes) == ["get woke", "put woke"]


def test_immediate_shutdown_stops_at_once_and_keeps_every_item_stored(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["ready1", "ready2", "held"])
        q.put("delayed", delay=3600)
        c = q.connect()
        c.get()
        c.get()
        held = c.get()
        q.shutdown(immediate=True)
        with pytest.raises(ShutDown):
            q.get_nowait()
        with pytest.raises(NotHeldError):
            c.ack(held)  # held ones went back
        q.join()  # returns: nothing is in progress any more
        assert q.qsize() == 0 and q.unacked_count() == 0
    with AckQueue(qpath) as q:
        assert (q.qsize(), q.delayed_count()) == (3, 1)
        assert [q.get() for _ in range(3)] == ["ready1", "ready2", "held"]


def test_join_returns_after_immediate_shutdown_from_another_thread(qpath):
    with AckQueue(qpath) as q:
        q.put("never processed")
        joined = threading.Event()
        t = threading.Thread(target=lambda: (q.join(), joined.set()))
        t.start()
        wait_for_waiter(q.all_tasks_done)  # join really waits: the shutdown is what ends it
        q.shutdown(immediate=True)
        t.join(5)
        assert joined.is_set()
