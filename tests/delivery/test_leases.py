"""``ack_timeout`` leases: overdue holds go back; the late holder is fenced; ``extend``."""

from __future__ import annotations

import threading
import time

import pytest

from ackqueue import AckQueue, LeaseExpiredError, ManualClock, NotHeldError


def test_an_overdue_hold_goes_back_and_the_late_ack_changes_nothing(qpath):
    clock = ManualClock()
    with AckQueue(qpath, ack_timeout=30, clock=clock) as q:
        q.put_many(["job", "next"])
        slow = q.connect()
        job = slow.get()
        clock.advance(29.9)
        assert q.unacked_count() == 1 and q.qsize() == 1
        clock.advance(0.2)
        assert q.unacked_count() == 0 and q.qsize() == 2
        with pytest.raises(LeaseExpiredError, match="ack_timeout"):
            slow.ack(job)
        assert issubclass(LeaseExpiredError, NotHeldError)
        other = q.connect()
        again = other.get()
        assert again == "job" and other.delivery(again).attempts == 2  # its original place
        other.ack(again)
    with AckQueue(qpath) as q:
        assert q.qsize() == 1  # only "next" is left: the late ack removed nothing twice


def test_extend_renews_the_lease(qpath):
    clock = ManualClock()
    with AckQueue(qpath, ack_timeout=10, clock=clock) as q:
        q.put("long job")
        c = q.connect()
        job = c.get()
        clock.advance(8)
        c.extend(job, 10)
        clock.advance(8)  # 16 s after the get: past the first lease, inside the renewed one
        assert q.unacked_count() == 1
        c.ack(job)
        assert q.unacked_count() == 0 and q.qsize() == 0


def test_extend_after_the_lease_ran_out_is_refused(qpath):
    clock = ManualClock()
    with AckQueue(qpath, ack_timeout=1, clock=clock) as q:
        q.put("x")
        c = q.connect()
        x = c.get()
        clock.advance(2)
        with pytest.raises(LeaseExpiredError):
            c.extend(x, 5)
        with pytest.raises(NotHeldError):  # reported once; afterwards plainly not held
            c.nack(x)


def test_a_hung_thread_loses_its_item_to_a_live_consumer_on_time(qpath):
    with AckQueue(qpath, ack_timeout=0.3) as q:
        q.put("work")
        holding, hung_forever = threading.Event(), threading.Event()
        late: list[BaseException] = []
        got_at: list[float] = []

        def hung_worker() -> None:
            c = q.connect()
            got_at.append(time.monotonic())
            item = c.get()
            holding.set()
            hung_forever.wait(10)  # never dies, never acks... until released below
            try:
                c.ack(item)
            except BaseException as exc:
                late.append(exc)

        t = threading.Thread(target=hung_worker)
        t.start()
        assert holding.wait(5)
        c = q.connect()
        item = c.get(timeout=30)  # blocks until the lease runs out: no other call needed
        waited = time.monotonic() - got_at[0]
        # Never before the lease ends; after it, only late by scheduling (wide: a loaded
        # machine), and far sooner than the get's own timeout.
        assert item == "work" and 0.29 < waited < 10
        c.ack(item)
        hung_forever.set()
        t.join(5)
        assert len(late) == 1 and isinstance(late[0], LeaseExpiredError)
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_leases_follow_each_hold_and_acked_holds_are_left_alone(qpath):
    clock = ManualClock()
    with AckQueue(qpath, ack_timeout=5, clock=clock) as q:
        q.put_many(range(4))
        c = q.connect()
        a, b = c.get(), c.get()
        clock.advance(3)
        d = c.get()
        c.ack(a)
        clock.advance(3)  # b's lease is out, d's is not, a was acked
        assert q.unacked_count() == 1
        with pytest.raises(LeaseExpiredError):
            c.ack(b)
        c.ack(d)
        assert sorted([c.get(), c.get()]) == [1, 3]


def test_settled_leases_do_not_pile_up_in_memory(qpath):
    clock = ManualClock()
    with AckQueue(qpath, ack_timeout=3600, clock=clock) as q:
        q.put_many(range(5000))
        c = q.connect()
        for _ in range(50):
            c.ack_many(c.get_many(100))
        assert len(q._timers._heap) <= 2 * 1024 + 100  # live deadlines plus a bounded rest
