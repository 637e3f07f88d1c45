"""Delayed delivery: ``put(delay=)``, ``put(not_before=)``, ``nack(delay=)``."""

from __future__ import annotations

import threading
import time

import pytest
from semantic_helpers import run_child

from ackqueue import AckQueue, Empty, ManualClock


def test_a_delayed_item_is_not_ready_before_it_is_due(qpath):
    clock = ManualClock()
    with AckQueue(qpath, clock=clock) as q:
        q.put("later", delay=60)
        q.put("at once")
        q.put("absolute", not_before=clock() + 30)
        assert (q.qsize(), q.delayed_count()) == (1, 2)
        assert q.get() == "at once"
        with pytest.raises(Empty):
            q.get_nowait()
        clock.advance(30)
        assert (q.qsize(), q.delayed_count()) == (1, 1)
        assert q.get_nowait() == "absolute"
        clock.advance(30)
        assert q.get_nowait() == "later"


def test_a_batch_put_with_not_before_waits_until_then(qpath):
    clock = ManualClock()
    with AckQueue(qpath, clock=clock) as q:
        q.put_many(["b0", "b1"], not_before=clock() + 30)
        assert (q.qsize(), q.delayed_count()) == (0, 2)
        clock.advance(30)
        assert [q.get_nowait(), q.get_nowait()] == ["b0", "b1"]


def test_nack_with_delay_retries_later_and_keeps_the_attempt_count(qpath):
    clock = ManualClock()
    with AckQueue(qpath, clock=clock, max_attempts=5) as q:
        q.put("retry me")
        c = q.connect()
        item = c.get()
        c.nack(item, delay=10)
        assert q.qsize() == 0 and q.delayed_count() == 1 and q.unacked_count() == 0
        clock.advance(10)
        again = c.get_nowait()
        assert again == "retry me" and c.delivery(again).attempts == 2
        c.ack(again)
        assert q.delayed_count() == 0


def test_a_blocked_get_wakes_when_the_first_delayed_item_falls_due(qpath):
    with AckQueue(qpath) as q:
        began = time.monotonic()
        # 'first' falls due first unless its put started 1.7 s after the other's: a margin for
        # a loaded machine (with 0.6 s here, a slow put once made 'second' due first).
        q.put("second", delay=2.0)
        q.put("first", delay=0.3)
        assert q.get(timeout=30) == "first"
        first_at = time.monotonic() - began
        assert q.get(timeout=30) == "second"
        second_at = time.monotonic() - began
        # Never early; late only by scheduling (wide: the test machine may be loaded), and far
        # sooner than the gets' own timeouts, so the due time is what woke them.
        assert 0.295 < first_at < 10 and 1.995 < second_at < 10


def test_a_delayed_put_wakes_a_getter_blocked_before_it_was_put(qpath):
    with AckQueue(qpath) as q:
        got: list = []
        t = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
        t.start()
        q.put("soon", delay=0.2)
        t.join(5)
        assert got == ["soon"]


KILLED_WITH_DELAYS = r"""
import os, signal, sys, time
from ackqueue import AckQueue
q = AckQueue(sys.argv[1])
q.put("due now")
q.put("in an hour", delay=3600)
q.put("due soon", not_before=time.time() + 0.5)
q.put("also now")
c = q.connect()
c.nack(c.get(), delay=3600)   # "due now" is retried in an hour
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_delays_survive_sigkill_and_reopen_does_not_deliver_early(qpath):
    assert run_child(KILLED_WITH_DELAYS, qpath).returncode == -9
    with AckQueue(qpath) as q:
        assert (q.qsize(), q.delayed_count()) in [(1, 3), (2, 2)]  # "due soon" may be due
        assert q.unfinished_tasks == 4
        c = q.connect()
        assert c.get(timeout=0) == "also now"
        assert c.get(timeout=5) == "due soon"
        with pytest.raises(Empty):
            c.get(timeout=0.1)
        assert q.delayed_count() == 2
        c.close()
    # Long after: due at open, ready at once, in key order.
    with AckQueue(qpath, clock=lambda: time.time() + 7200) as q:
        assert (q.qsize(), q.delayed_count()) == (4, 0)
        assert [q.get() for _ in range(4)] == ["due now", "in an hour", "due soon", "also now"]


def test_negative_or_double_delays_are_refused(qpath):
    with AckQueue(qpath) as q:
        with pytest.raises(ValueError):
            q.put(1, delay=-1)
        with pytest.raises(ValueError):
            q.put(1, delay=1, not_before=time.time())
        q.put(1)
        c = q.connect()
        with pytest.raises(ValueError):
            c.nack(c.get(), delay=-5)
        assert q.qsize() == 0 and q.unacked_count() == 1


def test_a_nack_with_zero_delay_gives_the_item_back_at_once_in_its_place(qpath):
    # A mutation survivor (benchmarks/mutation.py): refusing delay=0 as if it were negative.
    with AckQueue(qpath) as q:
        q.put_many(["a", "b"])
        c = q.connect()
        c.nack(c.get(), delay=0)
        assert q.delayed_count() == 0
        assert c.get_nowait() == "a"


def test_a_put_with_zero_delay_is_ready_at_once(qpath):
    # A mutation survivor (benchmarks/mutation.py): refusing delay=0 as if it were negative.
    with AckQueue(qpath) as q:
        q.put("a", delay=0)
        q.put_many(["b"], delay=0)
        assert q.delayed_count() == 0 and q.qsize() == 2
        assert [q.get_nowait(), q.get_nowait()] == ["a", "b"]


@pytest.mark.parametrize("shared", [False, True], ids=["one process", "shared"])
def test_an_item_whose_delay_passed_counts_as_ready_before_it_is_taken(short_qpath, shared):
    """Shared mode's ``qsize()`` subtracted every entry of the stored delay index, which an
    entry leaves only when its item is taken or settled: an item whose delay had passed was
    not counted, though a get delivers it (put 3, nack one with a delay: once it was due,
    ``qsize()`` said 2)."""
    clock = ManualClock()
    with AckQueue(short_qpath, clock=clock, shared=shared) as q:
        q.put_many(["a", "b", "c"])
        with q.connect() as c:
            c.nack(c.get(), delay=10)
            q.put("d", delay=20)
            assert q.qsize() == 2
            clock.advance(10)
            q.put("e")  # a commit: shared mode's estimate is counted again after it
            assert q.qsize() == 4  # a, b, c and e; d is still ahead
            clock.advance(10)
            q.put("f")
            assert q.qsize() == 6
            assert sorted(c.get(timeout=5) for _ in range(6)) == ["a", "b", "c", "d", "e", "f"]
