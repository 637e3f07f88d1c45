"""``task_done``/``join`` and ``maxsize`` back-pressure as ``queue.Queue`` has them, the same
on every implementation (an ack counts as ``task_done``; held items free their slot).

In shared mode ``join()`` counts this process's tasks (docs/howto/scaling.rst, "Ordering across
processes"), which is all there is here.
"""

from __future__ import annotations

import threading

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT
from polling import wait_for_waiter

import ackqueue


def test_join_returns_once_every_task_is_done_or_acked(queues) -> None:
    q = queues()
    q.put_many(["a", "b"])
    q.put("c")
    joined = threading.Event()
    joiner = threading.Thread(target=lambda: (q.join(), joined.set()))
    joiner.start()
    wait_for_waiter(q.all_tasks_done, GIVE_BACK_TIMEOUT)
    assert q.get_nowait() == "a"
    q.task_done()
    with q.connect() as c:
        c.ack(c.get_nowait())  # an ack is the task's task_done
        held = c.get_nowait()
        c.nack(held)  # given back: still a task to do
        assert not joined.is_set()
        c.ack(c.get_nowait())
    joiner.join(GIVE_BACK_TIMEOUT)
    assert joined.is_set()
    with pytest.raises(ValueError):
        q.task_done()


def test_a_full_queue_refuses_puts_and_a_hold_frees_a_slot(queues) -> None:
    q = queues(maxsize=2)
    q.put_many(["a", "b"])
    assert q.full()
    with pytest.raises(ackqueue.Full):
        q.put_nowait("refused")
    with pytest.raises(ackqueue.Full):
        q.put("refused", timeout=0.01)
    putter = threading.Thread(target=q.put, args=("c",), kwargs={"timeout": GIVE_BACK_TIMEOUT})
    putter.start()
    wait_for_waiter(q.not_full, GIVE_BACK_TIMEOUT)
    with q.connect() as c:
        a = c.get_nowait()  # held, no longer ready: the blocked put gets its slot
        putter.join(GIVE_BACK_TIMEOUT)
        assert not putter.is_alive()
        c.ack(a)
        assert drain(c) == ["b", "c"]


def test_a_join_waiting_when_the_queue_closes_raises_queue_closed(queues) -> None:
    """The standard library's join waited for ever once the queue closed with items not done
    (nothing would finish them); it raises QueueClosedError, there and on a closed queue."""
    q = queues()
    q.put("never done")
    raised: list[BaseException] = []

    def join() -> None:
        try:
            q.join()
        except BaseException as exc:
            raised.append(exc)

    joiner = threading.Thread(target=join)
    joiner.start()
    wait_for_waiter(q.all_tasks_done, GIVE_BACK_TIMEOUT)
    q.close()
    joiner.join(GIVE_BACK_TIMEOUT)
    assert not joiner.is_alive(), "join() went on waiting after close()"
    assert [type(exc) for exc in raised] == [ackqueue.QueueClosedError], raised
    with pytest.raises(ackqueue.QueueClosedError, match="is closed"):
        q.join()
