"""``put_many``, ``get_many``, ``ack_many``: one commit each, all or nothing."""

from __future__ import annotations

import random
import threading

import pytest
from polling import bounded, wait_for_waiter
from semantic_helpers import run_and_maybe_kill

from ackqueue import AckQueue, Empty, Full, NotHeldError, UnpicklableItemError


def test_each_batch_is_one_commit_and_keeps_the_order(qpath):
    with AckQueue(qpath) as q:
        commits = q._store.commits
        q.put_many(range(100))
        assert q._store.commits == commits + 1 and q.qsize() == 100
        c = q.connect()
        got = c.get_many(60)
        assert got == list(range(60)) and q._store.commits == commits + 1  # gets: no commit
        c.ack_many(got)
        assert q._store.commits == commits + 2
        rest = c.get_many(1000)
        assert rest == list(range(60, 100))
        assert [c.delivery(x).attempts for x in rest] == [1] * 40
        c.ack_many(rest)
        assert q.qsize() == q.unacked_count() == 0
    with AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_get_many_blocks_like_get_for_the_first_item_only(qpath):
    with AckQueue(qpath) as q:
        c = q.connect()
        with pytest.raises(Empty):
            c.get_many(10, timeout=0.05)
        with pytest.raises(Empty):
            c.get_many(10, block=False)
        # The put comes only once the get_many is blocked: the wait is what it returns from.
        putter = threading.Thread(target=lambda: (wait_for_waiter(q.not_empty), q.put("one")))
        putter.start()
        assert c.get_many(10, timeout=60) == ["one"]
        putter.join(60)


def test_ack_many_with_one_item_not_held_acks_none(qpath):
    with AckQueue(qpath) as q:
        q.put_many([5, 5, 7])
        c = q.connect()
        a, b, seven = c.get_many(3)
        with pytest.raises(NotHeldError):
            c.ack_many([a, b, "stranger"])
        assert q.unacked_count() == 3
        assert a is b  # two held 5s (small ints are one object): each ack settles one
        with pytest.raises(NotHeldError):
            c.ack_many([a, a, a])  # held twice, not three times: nothing is acked
        assert q.unacked_count() == 3
        c.ack_many([a, a])
        assert q.unacked_count() == 1 and c.deliveries()[0].item is seven


def test_a_bad_item_fails_the_whole_put_many(qpath):
    with AckQueue(qpath, maxsize=4) as q:
        with pytest.raises(UnpicklableItemError):
            q.put_many([1, lambda: 2, 3])
        assert q.qsize() == 0
        with pytest.raises(ValueError):
            q.put_many(range(5))  # can never fit
        q.put_many(range(3))
        with pytest.raises(Full):
            q.put_many(range(2), timeout=0.05)
        assert q.qsize() == 3


def test_batches_inside_a_transaction(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["a", "b"])
        c = q.connect()
        with pytest.raises(RuntimeError), c.transaction():
            got = c.get_many(2)
            c.ack_many(got)
            q.put_many(["x", "y"])
            raise RuntimeError
        assert q.qsize() == 2 and q.unacked_count() == 0
        with c.transaction():
            c.ack_many(c.get_many(2))
            q.put_many(["x", "y"])
        assert c.get_many(5) == ["x", "y"]


PUT_BATCHES = r"""
import sys
from ackqueue import AckQueue
q = AckQueue(sys.argv[1])
start = int(sys.argv[2])
print("ready", flush=True)
for batch in range(start, start + 1000):
    q.put_many([(batch, i) for i in range(50)])
    print(batch, flush=True)
"""


def test_a_sigkilled_put_many_stores_all_of_a_batch_or_none(qpath):
    rng, confirmed, start = random.Random(7), set(), 0
    for _ in range(8):
        _finished, out = run_and_maybe_kill(PUT_BATCHES, qpath, str(start), rng=rng, max_events=40)
        done = [int(line) for line in out.split()]
        confirmed.update(done)
        start += 1000
    with AckQueue(qpath) as q:
        c = q.connect()
        stored: dict[int, int] = {}
        for _ in bounded(100_000, "reading every batch"):
            if not q.qsize():
                break
            for batch, _i in c.get_many(1000):
                stored[batch] = stored.get(batch, 0) + 1
    assert confirmed, "no batch was ever confirmed: the test proved nothing"
    assert confirmed <= set(stored), "a batch whose put_many returned is missing"
    assert set(stored.values()) == {50}, "a batch was stored in part"


def test_put_many_wakes_several_blocked_consumers(qpath):
    with AckQueue(qpath) as q:
        got: list = []
        lock = threading.Lock()

        def consume() -> None:
            with q.connect() as c:
                item = c.get(timeout=5)
                with lock:
                    got.append(item)
                c.ack(item)

        threads = [threading.Thread(target=consume) for _ in range(3)]
        for t in threads:
            t.start()
        q.put_many([1, 2, 3])
        for t in threads:
            t.join(5)
        assert sorted(got) == [1, 2, 3]


ACK_BATCHES = r"""
import sys
from ackqueue import AckQueue
q = AckQueue(sys.argv[1])
c = q.connect()
print("ready", flush=True)
while q.qsize():
    got = c.get_many(40)
    c.ack_many(got)
    print(" ".join(str(n) for n in got), flush=True)
"""


def test_a_sigkilled_ack_many_removes_all_of_a_batch_or_none(qpath):
    with AckQueue(qpath) as q:
        for start in range(0, 8000, 1000):
            q.put_many(range(start, start + 1000))
    rng, acked, kills = random.Random(11), set(), 0
    for _ in range(30):
        finished, out = run_and_maybe_kill(ACK_BATCHES, qpath, rng=rng, max_events=30)
        acked.update(int(n) for n in out.split())
        if finished:
            break
        kills += 1
    assert kills >= 3, "the consumer was hardly ever killed: the test proved little"
    with AckQueue(qpath) as q:
        c = q.connect()
        left = []
        for _ in bounded(100_000, "reading what is left"):
            if not q.qsize():
                break
            left += c.get_many(1000)
    gone = set(range(8000)) - set(left)
    assert acked <= gone, "an item whose ack_many returned came back"
    assert len(gone - acked) <= 40 * kills  # committed, but killed before it could print
    # Batches are runs of 40 from the head: what is gone is whole batches, never part of one.
    assert len(gone) % 40 == 0
