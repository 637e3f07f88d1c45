"""Footprint bounds that do not depend on the machine's speed: O(1) counters with many items
queued, bytes appended per put/get/ack cycle, a bounded object cache."""

import os
import pickle
import statistics
import time

from hypothesis import given, settings
from hypothesis import strategies as st

import ackqueue
from ackqueue.records import Entry


def fill_directly(q, n, chunk=10_000):
    """Write what n puts leave (entries, length, reserved numbers) in big commits: a fast
    stand-in for n puts. The entries are ready once the queue is reopened."""
    rec, seq0 = q._book.record, q._book.seq_reserved()
    for s in range(0, n, chunk):
        k = min(chunk, n - s)

        def change(s=s, k=k):
            for i in range(s, s + k):
                rec.entries[seq0 + i] = Entry(pickle.dumps(i, 5), 0.0)
            rec.length.change(k)
            rec.reserve_seq(seq0 + s + k - 1)

        q._store.run(change)


def median_call_us(fn, calls=2000):
    times = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1000


def test_counters_take_constant_time_with_many_items_queued(qpath):
    with ackqueue.AckQueue(qpath, durability="relaxed", autopack=False) as q:
        fill_directly(q, 30_000)
    with ackqueue.AckQueue(qpath, durability="relaxed") as q:
        c = q.connect()
        held = [c.get() for _ in range(10)]
        assert q.qsize() == 30_000 - 10 and q.unacked_count() == 10
        for fn in (q.qsize, q.unacked_count, q.empty, q.full):
            # A few us measured; a count that walked 30,000 entries would take milliseconds.
            # Wide, for a loaded machine (speed itself is measured in benchmarks/).
            assert median_call_us(fn) < 1000, fn.__name__
        # Reading counters loaded no entries: the backlog is still unread behind its cursor.
        assert q._store.writer._cache.cache_non_ghost_count < 1000
        assert held == list(range(10))


def test_a_put_get_ack_cycle_appends_under_2_kb_with_10_000_queued(qpath):
    with ackqueue.AckQueue(qpath, durability="relaxed", autopack=False) as q:
        fill_directly(q, 10_000)
    with ackqueue.AckQueue(qpath, durability="relaxed", autopack=False) as q:
        c = q.connect()
        for i in range(100):  # reach the steady state at both ends of the tree
            q.put(i)
            c.ack(c.get())
        before = os.path.getsize(qpath)
        for i in range(500):
            q.put(i)
            c.ack(c.get())
        per_cycle = (os.path.getsize(qpath) - before) / 500
    assert per_cycle <= 2048


def test_object_caches_stay_bounded_while_many_items_pass(qpath):
    with ackqueue.AckQueue(qpath, durability="relaxed") as q:
        c = q.connect()
        for i in range(1000):
            q.put(i)
        for _ in range(1000):
            c.ack(c.get())
        writer = q._store.writer._cache.cache_non_ghost_count
        reader = q._book._reader.connection._cache.cache_non_ghost_count
    limit = 2 * q._store.db.getCacheSize()
    assert writer <= limit and reader <= limit


@settings(max_examples=25, deadline=None)
@given(
    backlog=st.integers(0, 40),
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "get", "ack", "nack"]), st.integers(0, 10)),
        max_size=60,
    ),
)
def test_gets_served_from_the_item_cache_match_a_model_queue(tmp_path_factory, backlog, ops):
    # Items put in this session and backlog read ahead are handed out from memory; whatever
    # mix of puts, gets, nacks and acks, every get must return what a plain FIFO would.
    path = os.path.join(tmp_path_factory.mktemp("q"), "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        for i in range(backlog):
            q.put(("old", i))
    ready = [("old", i) for i in range(backlog)]  # in delivery order
    order = {v: n for n, v in enumerate(ready)}
    held: list = []
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        c = q.connect()
        for n, (op, pick) in enumerate(ops):
            if op == "put":
                v = ("new", n)
                order[v] = len(order)
                q.put(v)
                ready.append(v)
            elif op == "get" and ready:
                got = c.get_nowait()
                assert got == ready.pop(0)
                held.append(got)
            elif op in ("ack", "nack") and held:
                v = held.pop(pick % len(held))
                if op == "ack":
                    c.ack(v)
                else:
                    c.nack(v)
                    ready.append(v)
                    ready.sort(key=order.__getitem__)
        assert q.qsize() == len(ready)
        assert [c.get_nowait() for _ in range(len(ready))] == ready


def test_priority_queue_items_need_not_be_hashable(qpath):
    # The item cache knows entries by sequence number, not by key: a PriorityAckQueue key
    # holds the item itself.
    with ackqueue.PriorityAckQueue(qpath, durability="relaxed") as q:
        for p in (3, 1, 2):
            q.put((p, {"job": [p]}))
    with ackqueue.PriorityAckQueue(qpath, durability="relaxed") as q:
        q.put((0, {"job": [0]}))
        assert [q.get()[0] for _ in range(4)] == [0, 1, 2, 3]
