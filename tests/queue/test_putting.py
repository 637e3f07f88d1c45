"""Puts against ``maxsize``: blocking, timeouts and places taken, for ``put``, ``put_many`` and
puts staged in a transaction, as ``queue.Queue.put`` documents them.

Written for the survivors of a mutation run on ackqueue/queue/putting.py
(benchmarks/mutation_survivors.rst): a ``put_many`` that ignored its timeout or ``block``, a
deadline computed backwards, places of a batch staged in a transaction counted once instead of
added, a rolled-back transaction that kept its places, a priority queue's batch keyed without
its items.
"""

from __future__ import annotations

import threading
import time

import pytest

import ackqueue
from ackqueue import AckQueue, Full, PriorityAckQueue

WAIT = 0.3  # a timeout to wait out: the put must take about this long, and then raise Full


def timed_full(put: object) -> float:
    """Seconds until ``put()`` raised Full (it must, within 30 s: a put that ignored its
    timeout would wait for ever)."""
    assert callable(put)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            put()
        except BaseException as exc:
            raised.append(exc)

    start = time.monotonic()
    putter = threading.Thread(target=run, daemon=True)
    putter.start()
    putter.join(30)
    assert not putter.is_alive(), "the put was still waiting after 30 s"
    assert [type(exc) for exc in raised] == [Full], raised
    return time.monotonic() - start


@pytest.fixture
def full_queue(qpath):
    """A queue of maxsize 2 holding two items."""
    with AckQueue(qpath, maxsize=2) as q:
        q.put_many(["a", "b"])
        yield q


@pytest.mark.parametrize("how", ["put", "put_many"])
def test_a_put_on_a_full_queue_waits_out_its_timeout_then_raises_full(full_queue, how):
    q = full_queue
    put = (lambda: q.put("c", timeout=WAIT)) if how == "put" else (
        lambda: q.put_many(["c"], timeout=WAIT)
    )
    waited = timed_full(put)
    assert WAIT * 0.9 <= waited < WAIT + 5, waited
    assert q.qsize() == 2


@pytest.mark.parametrize("how", ["put", "put_many"])
def test_a_put_that_must_not_block_raises_full_at_once(full_queue, how):
    q = full_queue
    put = (lambda: q.put("c", block=False, timeout=30)) if how == "put" else (
        lambda: q.put_many(["c"], block=False, timeout=30)
    )
    assert timed_full(put) < 5
    assert q.qsize() == 2


def test_a_blocked_put_many_lands_when_enough_places_free(full_queue):
    q = full_queue
    landed = threading.Event()

    def put() -> None:
        q.put_many(["c", "d"], timeout=30)
        landed.set()

    putter = threading.Thread(target=put)
    putter.start()
    with q.connect() as c:
        c.ack(c.get())
        assert not landed.wait(0.2), "a batch of two landed with one place free"
        c.ack(c.get())
        assert landed.wait(30)
    putter.join()
    assert q.qsize() == 2


@pytest.mark.parametrize("how", ["put", "put_many"])
def test_a_put_in_a_transaction_on_a_full_queue_honours_block_and_timeout(full_queue, how):
    q = full_queue

    def put(**kw: object) -> None:
        if how == "put":
            q.put("c", **kw)  # type: ignore[arg-type]
        else:
            q.put_many(["c"], **kw)  # type: ignore[arg-type]

    def in_a_transaction(**kw: object) -> None:
        """The put, inside a transaction of the thread timed_full runs it in."""
        with q.transaction():
            put(**kw)

    waited = timed_full(lambda: in_a_transaction(timeout=WAIT))
    assert WAIT * 0.9 <= waited < WAIT + 5, waited
    assert timed_full(lambda: in_a_transaction(block=False, timeout=30)) < 5
    assert q.qsize() == 2


def test_batches_staged_in_one_transaction_add_up_against_maxsize(qpath):
    with AckQueue(qpath, maxsize=5) as q:
        with q.transaction():
            q.put_many([1, 2])
            q.put_many([3, 4, 5])
            assert q.full(), "five staged puts fill maxsize 5"
            with pytest.raises(Full):
                q.put_nowait(6)
        assert q.qsize() == 5 and q.full()
        with q.connect() as c:
            c.ack(c.get())
        assert not q.full()
        q.put_nowait(6)
        assert q.full()


def test_a_committed_transaction_gives_back_the_places_its_puts_took_while_staged(qpath):
    with AckQueue(qpath, maxsize=3) as q:
        with q.transaction():
            q.put_many([1, 2])
        assert q.qsize() == 2 and not q.full()  # the two are queued, not staged twice
        q.put_nowait(3)
        assert q.full()


def test_a_rolled_back_transaction_frees_the_places_of_its_puts(qpath):
    with AckQueue(qpath, maxsize=2) as q:
        with pytest.raises(RuntimeError), q.transaction():
            q.put_many([1, 2])
            assert q.full()
            raise RuntimeError("roll back")
        assert q.qsize() == 0 and not q.full()
        q.put_nowait(3)
        q.put_nowait(4)
        assert q.full()
        with q.connect() as c:
            assert sorted([c.get_nowait(), c.get_nowait()]) == [3, 4]


def test_a_put_in_a_transaction_is_stored_only_when_the_transaction_commits(qpath):
    with AckQueue(qpath) as q:
        with pytest.raises(RuntimeError), q.transaction():
            q.put("rolled back")
            q.put_many(["rolled back too"])
            raise RuntimeError("roll back")
        assert q.qsize() == 0
    with AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_a_batch_larger_than_maxsize_is_refused_at_once(qpath):
    with AckQueue(qpath, maxsize=1) as q:
        with pytest.raises(ValueError, match="a batch of 2 items can never fit in maxsize 1"):
            q.put_many([1, 2])
        assert q.qsize() == 0


def test_a_negative_timeout_is_refused_only_where_a_put_could_wait(qpath):
    """As ``queue.Queue.put``: a bounded queue refuses a negative timeout of a blocking put;
    an unbounded one never waits, so never checks it."""
    with AckQueue(qpath, maxsize=1) as q:
        with pytest.raises(ValueError, match="non-negative"):
            q.put_many([1], timeout=-1)
        q.put_many([1], block=False, timeout=-1)  # not blocking: no timeout to check
        assert q.qsize() == 1
    with AckQueue(qpath + ".unbounded") as q:
        q.put_many([1], timeout=-1)
        q.put(2, timeout=-1)
        assert q.qsize() == 2


def test_maxsize_one_holds_one_item(qpath):
    with AckQueue(qpath, maxsize=1) as q:
        q.put_many(["a"])
        assert q.full()
        with pytest.raises(Full):
            q.put_many(["b"], block=False)
        with pytest.raises(Full):
            q.put("b", block=False)
        waited = timed_full(lambda: q.put_many(["b"], timeout=WAIT))
        assert WAIT * 0.9 <= waited < WAIT + 5, waited


def test_a_priority_queue_orders_a_batch_by_its_items(qpath):
    with PriorityAckQueue(qpath) as q:
        q.put_many([3, 1, 2])
        q.put(0)
        with q.connect() as c:
            assert [c.get_nowait() for _ in range(4)] == [0, 1, 2, 3]


class NotPlain:
    """An item that a serializer of the test's own decodes into an object, not plain data."""

    def __init__(self, value: int) -> None:
        self.value = value


class ObjectsSerializer:
    name = "objects-for-a-test"

    def dumps(self, obj: object) -> bytes:
        assert isinstance(obj, NotPlain)
        return str(obj.value).encode()

    def loads(self, data: bytes) -> NotPlain:
        return NotPlain(int(data))


def test_a_priority_queue_with_another_serializer_orders_by_the_decoded_item(qpath):
    """The key of a priority entry is the item as decoded (plain data, so that the tree names
    no class): a serializer that decodes into an object cannot order a PriorityAckQueue, and
    the put says so, storing nothing; with JSON a tuple orders as the list it comes back as."""
    with PriorityAckQueue(qpath, serializer=ObjectsSerializer()) as q:
        with pytest.raises(ackqueue.UnpicklableItemError, match="orders by the item as it"):
            q.put(NotPlain(1))
        with pytest.raises(ackqueue.UnpicklableItemError, match="orders by the item as it"):
            q.put_many([NotPlain(2)])
        assert q.qsize() == 0
    with PriorityAckQueue(qpath + ".json", serializer="json") as q:
        q.put_many([[2, "b"], (1, "a")])
        q.put((0, "z"))
        with q.connect() as c:
            assert [c.get_nowait() for _ in range(3)] == [[0, "z"], [1, "a"], [2, "b"]]


def test_put_nowait_passes_its_options_on_to_put(qpath):
    """``put_nowait(item, **options)`` is ``put(item, block=False, **options)``: a priority,
    a delay and a key each take effect."""
    with AckQueue(qpath) as q:
        q.put_nowait("later", delay=60)
        q.put_nowait("low", priority=5)
        q.put_nowait("high", priority=1)
        q.put_nowait("keyed", priority=9, key="k")
        assert q.delayed_count() == 1 and q.qsize() == 3
        assert q.put("again", key="k") is False  # the key is live
        assert [q.get_nowait() for _ in range(3)] == ["high", "low", "keyed"]
