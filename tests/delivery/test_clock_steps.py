"""A step of the wall clock (NTP, a resumed VM) while a queue runs: durations inside the process
(``ack_timeout``, ``group_interval``) keep their length, and a stored due time (a delay) falls
due when the wall clock passes it, also by a forward step. The system clock is never touched: the
queue's ``clock=`` is a wall clock that a test steps, durations run on ``time.monotonic``."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from ackqueue import AckQueue
from tests.polling import wait_until

HOUR = 3600.0


class SteppedClock:
    """``time.time()`` plus an offset that a test changes, as an operator stepping the clock."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def step(self, seconds: float) -> None:
        self.offset += seconds


def test_a_backward_step_does_not_freeze_a_lease() -> None:
    clock = SteppedClock()
    with AckQueue(None, ack_timeout=0.3, clock=clock) as q:
        q.put("job")
        slow = q.connect()
        slow.get()
        clock.step(-HOUR)
        wait_until(lambda: q.qsize() == 1, timeout=5, what="the lease to run out")
        assert q.unacked_count() == 0


def test_a_backward_step_does_not_freeze_group_interval() -> None:
    clock = SteppedClock()
    with AckQueue(None, group_interval=0.3, clock=clock) as q, q.connect() as c:
        q.put("first", group="host")
        q.put("second", group="host")
        c.ack(c.get())
        clock.step(-HOUR)
        assert c.get(timeout=5) == "second"


def test_a_forward_step_wakes_a_get_blocked_on_a_delayed_item() -> None:
    clock = SteppedClock()
    with AckQueue(None, clock=clock) as q:
        q.put("later", delay=HOUR)
        got: list[object] = []

        def consume() -> None:
            try:
                got.append(q.get(timeout=10))
            except queue.Empty:
                got.append(queue.Empty)

        waiter = threading.Thread(target=consume)
        waiter.start()
        clock.step(HOUR + 1)
        waiter.join(15)
        assert got == ["later"]


def test_a_backward_step_postpones_a_delayed_item_by_the_step() -> None:
    clock = SteppedClock()
    with AckQueue(None, clock=clock) as q:
        q.put("later", delay=0.2)
        clock.step(-HOUR)
        with pytest.raises(queue.Empty):
            q.get(timeout=0.6)  # the documented meaning: the due time is a wall-clock time
        clock.step(HOUR)
        assert q.get(timeout=5) == "later"
