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



def test_a_put_landing_after_an_immediate_shutdown_stays_stored_and_is_not_handed_out(qpath):
    """A put accepted before an immediate shutdown whose commit lands after it (here: at the
    end of its transaction) is kept for the next start, as the drained items are: gets after
    the shutdown still raise at once, and ``join()`` does not wait for it."""
    with AckQueue(qpath) as q:
        with q.transaction():
            q.put("late")
            q.shutdown(immediate=True)
        with pytest.raises(ShutDown):
            q.get_nowait()
        assert q.qsize() == 0
        q.join()
    with AckQueue(qpath) as q:
        assert q.get_nowait() == "late"

@pytest.mark.parametrize("kind", [AckQueue, ackqueue.LifoAckQueue, ackqueue.PriorityAckQueue])
def test_immediate_shutdown_under_load_lets_join_return(qpath, kind):
    """4 threads put, 6 loop on get(False) + task_done, 2 wait in join(): after
    shutdown(immediate=True) every thread ends, the joiners included (items given back or
    landing after the drain must not keep join() waiting for ever)."""
    with kind(qpath) as q:
        stop = threading.Event()
        errors: list[BaseException] = []

        def guarded(body):
            def run() -> None:
                try:
                    body()
                except ShutDown:
                    pass
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    errors.append(exc)

            return run

        done = [0, 0]  # puts, gets (each thread adds under the GIL; an estimate suffices)

        def put() -> None:
            while not stop.is_set():
                q.put(done[0])
                done[0] += 1

        def get() -> None:
            while not stop.is_set():
                try:
                    q.get(False)
                except queue.Empty:
                    continue
                done[1] += 1
                q.task_done()

        workers = [threading.Thread(target=guarded(put)) for _ in range(4)]
        workers += [threading.Thread(target=guarded(get)) for _ in range(6)]
        joiners = [threading.Thread(target=q.join) for _ in range(2)]
        for t in workers + joiners:
            t.start()
        wait_until(lambda: done[0] > 40 and done[1] > 20, timeout=60, what="the load to run")
        q.shutdown(immediate=True)
        for t in joiners:
            t.join(30)
        stop.set()
        for t in workers:
            t.join(30)
        assert not any(t.is_alive() for t in joiners), "join() never returned"
        assert not any(t.is_alive() for t in workers)
        assert errors == []
