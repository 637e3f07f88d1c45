"""The standard library's timeout rule, kept by every blocking call of ackqueue (queue/core.py).

``queue.Queue`` takes ``timeout=0`` on a blocking call as "do not wait" (``Empty`` or ``Full``
at once, or the item if there is one) and refuses a negative timeout with a ``ValueError``. The
contract promises that code written for ``queue.Queue`` behaves the same on an ``AckQueue``;
the consumer's ``get`` and the batches take the same rule. Found by the mutation run of
core.py (benchmarks/mutation_survivors_queue.rst).
"""

from __future__ import annotations

import queue
import threading

import pytest

import ackqueue


def stdlib_message(call) -> str:
    with pytest.raises(ValueError) as raised:
        call()
    return str(raised.value)


def test_a_zero_timeout_does_not_wait_and_is_no_error_as_in_the_stdlib():
    plain = queue.Queue()
    with pytest.raises(queue.Empty):
        plain.get(timeout=0)
    with ackqueue.AckQueue(None) as q, q.connect() as c:
        with pytest.raises(queue.Empty):
            q.get(timeout=0)
        with pytest.raises(queue.Empty):
            q.get(True, 0)
        with pytest.raises(queue.Empty):
            c.get(timeout=0)
        with pytest.raises(queue.Empty):
            c.get_many(3, timeout=0)
        q.put("a", timeout=0)
        q.put_many(["b", "c", "d"], timeout=0)
        assert q.get(timeout=0) == "a"
        held = [c.get(timeout=0), *c.get_many(5, timeout=0)]
        assert held == ["b", "c", "d"]
        c.ack_many(held)
        assert q.qsize() == 0


def test_a_zero_timeout_on_a_full_bounded_queue_is_full_at_once_as_in_the_stdlib():
    plain = queue.Queue(maxsize=1)
    plain.put(1, timeout=0)
    with pytest.raises(queue.Full):
        plain.put(2, timeout=0)
    with ackqueue.AckQueue(None, maxsize=2) as q:
        q.put_many([1], timeout=0)
        q.put(2, timeout=0)
        with pytest.raises(queue.Full):
            q.put(3, timeout=0)
        with pytest.raises(queue.Full):
            q.put_many([3], timeout=0)
        assert [q.get_nowait(), q.get_nowait()] == [1, 2]


@pytest.mark.parametrize("call", [
    pytest.param(lambda q, c: q.get(timeout=-1), id="queue-get"),
    pytest.param(lambda q, c: c.get(timeout=-1), id="consumer-get"),
    pytest.param(lambda q, c: c.get_many(2, timeout=-0.5), id="consumer-get-many"),
])
def test_a_negative_timeout_is_the_stdlibs_value_error_with_its_words(call):
    says = stdlib_message(lambda: queue.Queue().get(timeout=-1))
    with ackqueue.AckQueue(None) as q, q.connect() as c:
        q.put("kept")
        with pytest.raises(ValueError) as raised:
            call(q, c)
        assert str(raised.value) == says
        assert q.get_nowait() == "kept"  # the refused call took nothing


def test_a_negative_timeout_on_a_bounded_put_is_the_stdlibs_value_error():
    says = stdlib_message(lambda: queue.Queue(maxsize=1).put(1, timeout=-1))
    with ackqueue.AckQueue(None, maxsize=3) as q:
        for put in (lambda: q.put(1, timeout=-1), lambda: q.put_many([1, 2], timeout=-1)):
            with pytest.raises(ValueError) as raised:
                put()
            assert str(raised.value) == says
        assert q.qsize() == 0


class Holder:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # deep inside the item: what cannot be pickled


def test_an_unpicklable_items_error_keeps_the_pickling_error_as_its_cause():
    # The "clear error" of the contract: the message names the item's type, and the pickling
    # error it comes from stays chained to it, with its traceback, for a user to see which
    # part of the item could not be pickled. The hook that stages the put runs inside the
    # standard library's put; what it raises comes out of it as it was.
    with ackqueue.AckQueue(None) as q:
        with pytest.raises(ackqueue.UnpicklableItemError) as raised:
            q.put(Holder())
        assert isinstance(raised.value.__cause__, TypeError)
        assert "lock" in str(raised.value.__cause__)
        assert q.qsize() == 0
