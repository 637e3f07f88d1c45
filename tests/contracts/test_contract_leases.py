"""Leases (``ack_timeout``), the same on every implementation, on a manual clock: an item held
past its lease goes back in its place, the late holder's ``ack`` raises ``LeaseExpiredError``
and changes nothing, and ``extend`` renews the lease.

In shared mode the give-back of a lapsed lease is committed by the session thread moments
after the clock moves (docs/howto/scaling.rst): see ``take_given_back`` for what that allows
the tests to check.
"""

from __future__ import annotations

import pytest
from conftest import drain
from contracts.implementations import settled, take_given_back

import ackqueue


def test_an_overdue_hold_goes_back_in_place_and_the_late_ack_changes_nothing(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(ack_timeout=30, clock=clock)
    q.put_many(["job", "next"])
    slow = q.connect()
    job = slow.get_nowait()
    clock.advance(29.9)
    settled(q, ready=1, held=1)
    clock.advance(0.2)
    settled(q, ready=2, held=0)
    with pytest.raises(ackqueue.LeaseExpiredError, match="ack_timeout"):
        slow.ack(job)
    assert issubclass(ackqueue.LeaseExpiredError, ackqueue.NotHeldError)
    with pytest.raises(ackqueue.NotHeldError):  # reported once; afterwards plainly not held
        slow.nack(job)
    with q.connect() as other:
        take_given_back(queues, other, ["job", "next"])
        assert {d.item: d.attempts for d in other.deliveries()} == {"job": 2, "next": 1}
    slow.close()


def test_extend_renews_the_lease(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(ack_timeout=10, clock=clock)
    q.put_many(["long job", "other"])
    with q.connect() as c:
        job = c.get_nowait()
        clock.advance(8)
        c.extend(job, 10)
        clock.advance(8)  # 16 s after the get: past the first lease, inside the renewed one
        settled(q, ready=1, held=1)
        c.ack(job)
        settled(q, ready=1, held=0)
        assert drain(c) == ["other"]


def test_extend_after_the_lease_ran_out_is_refused(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(ack_timeout=1, clock=clock)
    q.put("x")
    with q.connect() as c:
        x = c.get_nowait()
        clock.advance(2)
        with pytest.raises(ackqueue.LeaseExpiredError):
            c.extend(x, 5)
        take_given_back(queues, c, ["x"])


def test_each_hold_has_its_own_lease(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(ack_timeout=5, clock=clock)
    q.put_many([0, 1, 2, 3])
    with q.connect() as c:
        a, b = c.get_nowait(), c.get_nowait()
        clock.advance(3)
        d = c.get_nowait()
        c.ack(a)
        clock.advance(3)  # b's lease is out, d's is not, a was acked
        settled(q, ready=2, held=1)
        with pytest.raises(ackqueue.LeaseExpiredError):
            c.ack(b)
        c.ack(d)
        take_given_back(queues, c, [1, 3])
        assert drain(c) == []
