"""Code written for queue.Queue runs unchanged on the ackqueue classes, with the same results.

Each test runs one scripted program against a standard library queue and its ackqueue twin
(on a real FileStorage file) and compares what the two did.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polling import bounded, wait_for_waiter

import ackqueue

PAIRS = [
    pytest.param(queue.Queue, ackqueue.AckQueue, id="fifo"),
    pytest.param(queue.LifoQueue, ackqueue.LifoAckQueue, id="lifo"),
    pytest.param(queue.PriorityQueue, ackqueue.PriorityAckQueue, id="priority"),
]
ACK_CLASSES = [
    pytest.param(ackqueue.AckQueue, id="fifo"),
    pytest.param(ackqueue.LifoAckQueue, id="lifo"),
    pytest.param(ackqueue.PriorityAckQueue, id="priority"),
]


def run_on_both(std_cls, ack_cls, path, program, maxsize=0):
    """Run ``program(q)`` on a stdlib queue and on an ackqueue; return both results."""
    expected = program(std_cls(maxsize))
    with ack_cls(path, maxsize) as q:
        got = program(q)
    return expected, got


def test_empty_and_full_are_the_standard_librarys():
    assert ackqueue.Empty is queue.Empty
    assert ackqueue.Full is queue.Full


def test_every_class_is_a_queue_queue():
    for cls in (ackqueue.AckQueue, ackqueue.LifoAckQueue, ackqueue.PriorityAckQueue):
        assert issubclass(cls, queue.Queue)


# -- order -------------------------------------------------------------------------------------

# A script is a list of ("put", n) and ("get", None) steps; "get" on an empty queue is
# get_nowait, whose Empty is recorded like any other outcome.
scripts = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(-5, 5)),
        st.tuples(st.just("get"), st.none()),
    ),
    max_size=30,
)


def play(script):
    def program(q):
        out = []
        for op, arg in script:
            if op == "put":
                q.put(arg)
            else:
                try:
                    out.append(q.get_nowait())
                except queue.Empty:
                    out.append("empty")
            out.append((q.qsize(), q.empty(), q.full()))
        return out

    return program


@pytest.mark.parametrize("std_cls, ack_cls", PAIRS)
@settings(max_examples=25, deadline=None)
@given(script=scripts)
def test_same_order_and_sizes_as_stdlib(std_cls, ack_cls, script):
    with tempfile.TemporaryDirectory() as d:
        expected, got = run_on_both(std_cls, ack_cls, os.path.join(d, "q.fs"), play(script))
    assert got == expected


@pytest.mark.parametrize("std_cls, ack_cls", PAIRS)
def test_order_survives_a_reopen(std_cls, ack_cls, qpath):
    items = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    ref = std_cls()
    for n in items:
        ref.put(n)
    expected = [ref.get() for _ in range(4)]
    with ack_cls(qpath) as q:
        for n in items:
            q.put(n)
        got = [q.get() for _ in range(4)]
    for n in (7, 0, 8):
        ref.put(n)
    expected += [ref.get() for _ in range(ref.qsize())]
    with ack_cls(qpath) as q:
        for n in (7, 0, 8):
            q.put(n)
        got += [q.get() for _ in range(q.qsize())]
    assert got == expected


def test_priority_queue_orders_tuples_like_the_stdlib(qpath):
    items = [(2, "b"), (1, "z"), (2, "a"), (0, "x"), (1, "a")]

    def program(q):
        for item in items:
            q.put(item)
        return [q.get() for _ in items]

    expected, got = run_on_both(queue.PriorityQueue, ackqueue.PriorityAckQueue, qpath, program)
    assert got == expected == sorted(items)


# -- blocking and timeouts ---------------------------------------------------------------------


@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_get_with_timeout_on_empty_raises_empty_after_the_timeout(ack_cls, qpath):
    with ack_cls(qpath) as q:
        start = time.monotonic()
        with pytest.raises(queue.Empty):
            q.get(timeout=0.2)
        elapsed = time.monotonic() - start
    assert 0.19 <= elapsed < 10  # the timeout is kept; the margin is for a loaded machine


@pytest.mark.parametrize("std_cls, ack_cls", PAIRS)
def test_nowait_calls_raise_like_the_stdlib(std_cls, ack_cls, qpath):
    def program(q):
        out = []
        for step in (
            q.get_nowait,
            lambda: q.put_nowait(1),
            lambda: q.put_nowait(2),
            q.get_nowait,
            q.get_nowait,
            lambda: q.get(block=False),
        ):
            try:
                out.append(step())
            except (queue.Empty, queue.Full) as exc:
                out.append(type(exc))
        return out

    expected, got = run_on_both(std_cls, ack_cls, qpath, program, maxsize=1)
    assert got == expected == [queue.Empty, None, queue.Full, 1, queue.Empty, queue.Empty]


@pytest.mark.parametrize("std_cls, ack_cls", PAIRS)
def test_argument_errors_are_the_standard_librarys(std_cls, ack_cls, qpath):
    """Negative timeouts on blocking calls are a ValueError (with or without items), a
    negative timeout on a non-blocking call is ignored, as in the standard library."""

    def program(q):
        out = []
        for step in (
            lambda: q.get(timeout=-1),
            lambda: q.put(1, timeout=-1),
            lambda: q.put(1, block=False, timeout=-1),
            lambda: q.get(timeout=-1),
            lambda: q.get(block=False, timeout=-1),
            lambda: q.put_nowait(2),
            q.task_done,
            q.task_done,
            q.task_done,
        ):
            try:
                out.append(step())
            except (queue.Empty, queue.Full, ValueError) as exc:
                out.append((type(exc), str(exc)))
        return out

    expected, got = run_on_both(std_cls, ack_cls, qpath, program)
    assert got == expected
    assert expected[0] == (ValueError, "'timeout' must be a non-negative number")


@pytest.mark.parametrize("maxsize", [0, 1])
@pytest.mark.parametrize("ack_cls, extra", [
    pytest.param(cls, extra, id=f"{cls.__name__}-{next(iter(extra))}")
    for cls in (ackqueue.AckQueue, ackqueue.LifoAckQueue, ackqueue.PriorityAckQueue)
    for extra in ({"key": "k"}, {"group": "g"}, {"delay": 0}, {"priority": 1})
    if not (cls is ackqueue.PriorityAckQueue and "priority" in extra)  # it orders by the items
])
def test_puts_with_ackqueues_own_arguments_keep_the_standard_librarys_timeout_rule(
    ack_cls, extra, maxsize, qpath
):
    """``put(item, timeout=...)`` with ``key=``, ``group=``, ``delay=`` or ``priority=`` checks
    its timeout exactly as ``queue.Queue.put`` does: only where ``maxsize`` bounds the queue."""

    def outcome(put, **kwargs):
        try:
            put(1, **kwargs)
            return None
        except (ValueError, TypeError) as exc:
            return type(exc)

    for timeout in (-1, "soon"):
        std = queue.Queue(maxsize)
        expected = outcome(std.put, timeout=timeout)
        with ack_cls(qpath, maxsize=maxsize, name=f"t{maxsize}") as q:
            assert outcome(q.put, timeout=timeout, **extra) == expected, timeout
            assert q.qsize() == (1 if expected is None else 0)
            if expected is None:
                q.get()


@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_put_with_timeout_on_full_raises_full_after_the_timeout(ack_cls, qpath):
    with ack_cls(qpath, maxsize=2) as q:
        q.put(1)
        q.put(2)
        assert q.full()
        start = time.monotonic()
        with pytest.raises(queue.Full):
            q.put(3, timeout=0.2)
        elapsed = time.monotonic() - start
        assert 0.19 <= elapsed < 10  # the timeout is kept; the margin is for a loaded machine
        assert q.qsize() == 2
        assert [q.get(), q.get()] in ([1, 2], [2, 1])
        assert q.empty()


@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_blocked_get_is_woken_by_a_put_from_another_thread(ack_cls, qpath):
    with ack_cls(qpath) as q:
        got = []
        getter = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
        getter.start()
        wait_for_waiter(q.not_empty)
        q.put(42)
        getter.join(5)
        assert got == [42]


@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_blocked_put_wakes_when_a_get_frees_a_slot(ack_cls, qpath):
    with ack_cls(qpath, maxsize=1) as q:
        q.put(1)
        putter = threading.Thread(target=q.put, args=(2,), kwargs={"timeout": 10})
        putter.start()
        wait_for_waiter(q.not_full)
        assert q.get() == 1
        putter.join(5)
        assert not putter.is_alive()
        assert q.get_nowait() == 2


@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_held_items_free_their_slot_for_back_pressure(ack_cls, qpath):
    # qsize() counts ready items only, so a consumer's hold frees a slot just as a get does.
    with ack_cls(qpath, maxsize=1) as q:
        q.put(1)
        putter = threading.Thread(target=q.put, args=(2,), kwargs={"timeout": 10})
        putter.start()
        wait_for_waiter(q.not_full)
        with q.connect() as c:
            item = c.get()
            putter.join(5)
            assert not putter.is_alive()
            c.ack(item)
        assert q.get_nowait() == 2


# -- task_done and join ------------------------------------------------------------------------


@pytest.mark.parametrize("std_cls, ack_cls", PAIRS)
def test_join_returns_once_every_task_is_done(std_cls, ack_cls, qpath):
    def program(q):
        for n in range(5):
            q.put(n)
        joined = threading.Event()
        threading.Thread(target=lambda: (q.join(), joined.set()), daemon=True).start()
        seen = []
        for _ in range(5):
            seen.append(q.get())
            early = joined.wait(0.01)
            q.task_done()
            seen.append(early)
        seen.append(joined.wait(5))
        return seen

    expected, got = run_on_both(std_cls, ack_cls, qpath, program)
    assert got == expected
    assert got[-1] is True and not any(x is True for x in got[1:-1:2])


@pytest.mark.parametrize("std_cls, ack_cls", PAIRS)
def test_task_done_too_often_raises_value_error(std_cls, ack_cls, qpath):
    def program(q):
        q.put(1)
        q.get()
        q.task_done()
        with pytest.raises(ValueError):
            q.task_done()
        q.join()  # nothing unfinished: returns at once
        return "ok"

    assert run_on_both(std_cls, ack_cls, qpath, program) == ("ok", "ok")


def test_items_left_from_an_earlier_session_count_as_unfinished_tasks(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        q.put("b")
    with ackqueue.AckQueue(qpath) as q:
        q.get()
        q.task_done()
        q.get()
        q.task_done()
        q.join()
        with pytest.raises(ValueError):
            q.task_done()


def test_an_ack_counts_as_task_done_for_join(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        with q.connect() as c:
            c.ack(c.get())
        q.join()
        with pytest.raises(ValueError):
            q.task_done()


# -- subclasses whose hooks raise ---------------------------------------------------------------


class Refused(Exception):
    pass


def raising_put_subclass(base, when):
    class RaisingPut(base):
        def _put(self, item):
            if item == "bad" and when == "before":
                raise Refused
            super()._put(item)
            if item == "bad" and when == "after":
                raise Refused

    return RaisingPut


def raising_get_subclass(base, when):
    class RaisingGet(base):
        fail_next = False

        def _get(self):
            if self.fail_next and when == "before":
                self.fail_next = False
                raise Refused
            item = super()._get()
            if self.fail_next and when == "after":
                self.fail_next = False
                raise Refused
            return item

    return RaisingGet


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_subclass_put_that_raises_changes_nothing(ack_cls, when, qpath):
    cls = raising_put_subclass(ack_cls, when)
    with cls(qpath, maxsize=3) as q:
        q.put("a")
        with pytest.raises(Refused):
            q.put("bad")
        assert (q.qsize(), q.unfinished_tasks, q.full()) == (1, 1, False)
        q.put("b")
        q.put("c")
        assert q.full()
        first = q.get()
    with cls(qpath) as q:
        assert q.qsize() == 2
        rest = [q.get_nowait(), q.get_nowait()]
        with pytest.raises(queue.Empty):
            q.get_nowait()
    expected = ["c", "b", "a"] if ack_cls is ackqueue.LifoAckQueue else ["a", "b", "c"]
    assert [first, *rest] == expected


@pytest.mark.parametrize("when", ["before", "after"])
def test_subclass_put_that_raises_on_an_unbounded_queue_changes_nothing(when, qpath):
    """Without maxsize a put runs the hook without queue.Queue.put (nothing to wait for):
    the hook's failure still leaves no place taken, no task counted, nothing stored."""
    cls = raising_put_subclass(ackqueue.AckQueue, when)
    with cls(qpath) as q:
        q.put("a")
        with pytest.raises(Refused):
            q.put("bad")
        assert (q.qsize(), q.unfinished_tasks) == (1, 1)
        q.put("b")
        assert (q.get_nowait(), q.get_nowait()) == ("a", "b")
        q.task_done()
        q.task_done()
        q.join()
    with cls(qpath) as q:
        assert q.qsize() == 0


@pytest.mark.parametrize("when", ["before", "after"])
def test_subclass_put_that_raises_does_not_stall_a_waiting_getter(when, qpath):
    cls = raising_put_subclass(ackqueue.AckQueue, when)
    with cls(qpath) as q:
        got = []
        getter = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
        getter.start()
        wait_for_waiter(q.not_empty)
        with pytest.raises(Refused):
            q.put("bad")
        q.put("good")
        getter.join(5)
        assert got == ["good"]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_subclass_get_that_raises_changes_nothing(ack_cls, when, qpath):
    cls = raising_get_subclass(ack_cls, when)
    with cls(qpath) as q:
        for n in (1, 2, 3):
            q.put(n)
        expected = [q.get()]
        q.fail_next = True
        with pytest.raises(Refused):
            q.get()
        assert (q.qsize(), q.unacked_count()) == (2, 0)
        with q.connect() as c:
            q.fail_next = True
            with pytest.raises(Refused):
                c.get()
            assert (q.qsize(), q.unacked_count(), c.deliveries()) == (2, 0, [])
            expected.append(c.get())
            c.ack(expected[-1])
        q.fail_next = True
        with pytest.raises(Refused):
            q.get()
    with cls(qpath) as q:
        assert q.qsize() == 1
        expected.append(q.get_nowait())
    ref = {
        ackqueue.AckQueue: [1, 2, 3],
        ackqueue.LifoAckQueue: [3, 2, 1],
        ackqueue.PriorityAckQueue: [1, 2, 3],
    }[ack_cls]
    assert expected == ref


def test_reopened_queue_after_many_sessions_keeps_fifo_order(qpath):
    expected = []
    for session in range(4):
        with ackqueue.AckQueue(qpath) as q:
            for n in range(5):
                q.put((session, n))
                expected.append((session, n))
            got = q.get()
            assert got == expected.pop(0)
    with ackqueue.AckQueue(qpath) as q:
        rest = []
        for _ in bounded(100_000, "draining the queue"):
            if q.empty():
                break
            rest.append(q.get())
    assert rest == expected


# -- closing -----------------------------------------------------------------------------------


def blocked_call_outcome(q, call, condition):
    """Start ``call`` in a thread, wait until it blocks on ``condition``, close ``q``."""
    outcome = []

    def run():
        try:
            call()
            outcome.append("returned")
        except Exception as exc:
            outcome.append(type(exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for_waiter(condition)
    q.close()
    t.join(5)
    return outcome


@pytest.mark.parametrize("ack_cls", ACK_CLASSES)
def test_close_wakes_a_blocked_get_with_queue_closed_error(ack_cls, qpath):
    q = ack_cls(qpath)
    outcome = blocked_call_outcome(q, lambda: q.get(timeout=30), q.not_empty)
    assert outcome == [ackqueue.QueueClosedError]


def test_close_wakes_a_blocked_consumer_get(qpath):
    q = ackqueue.AckQueue(qpath)
    # The consumer is connected in the thread that gets, as a consumer must be.
    outcome = blocked_call_outcome(q, lambda: q.connect().get(timeout=30), q.not_empty)
    assert outcome == [ackqueue.QueueClosedError]


@pytest.mark.parametrize("maxsize", [1, 2])
def test_close_wakes_a_put_blocked_on_a_full_queue(maxsize, qpath):
    q = ackqueue.AckQueue(qpath, maxsize=maxsize)
    for n in range(maxsize):
        q.put(n)
    outcome = blocked_call_outcome(q, lambda: q.put("late", timeout=30), q.not_full)
    assert outcome == [ackqueue.QueueClosedError]
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == maxsize
