"""Items stored by an earlier session (the backlog) are delivered in order, also after a pack."""

from __future__ import annotations

import os
import tempfile
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ackqueue


def test_backlog_after_reopen_is_delivered_in_order_across_packs(qpath):
    # Enough items for several BTree buckets, so the backlog scan loads buckets lazily, and
    # a put (which rewrites the last bucket) plus a pack between two gets.
    n = 130
    with ackqueue.AckQueue(qpath) as q:
        for i in range(n):
            q.put(i)
    with ackqueue.AckQueue(qpath) as q:
        got = []
        for i in range(n):
            got.append(q.get())
            q.put(1000 + i)
            if i % 10 == 0:
                q.pack()
        rest = [q.get() for _ in range(n)]
    assert got == list(range(n))
    assert rest == [1000 + i for i in range(n)]


def test_backlog_drains_while_another_thread_packs(qpath):
    n = 120
    with ackqueue.AckQueue(qpath) as q:
        for i in range(n):
            q.put(i)
    with ackqueue.AckQueue(qpath) as q:
        stop = threading.Event()
        errors = []

        def packer():
            try:
                while not stop.is_set():
                    q.pack()
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=packer)
        t.start()
        try:
            got = []
            with q.connect() as c:
                for i in range(n):
                    item = c.get(timeout=10)
                    got.append(item)
                    c.ack(item)
                    q.put(n + i)
        finally:
            stop.set()
            t.join(30)
        assert not errors, errors
        assert got == list(range(n))
        assert [q.get() for _ in range(n)] == [n + i for i in range(n)]


# A script of puts with a priority, gets, and reopens; the model is the ready list sorted by
# (priority, put order) for AckQueue and (priority, reverse put order) for LifoAckQueue.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(-2, 2)),
        st.tuples(st.just("get"), st.none()),
        st.tuples(st.just("reopen"), st.none()),
    ),
    max_size=40,
)


@pytest.mark.parametrize("cls", [ackqueue.AckQueue, ackqueue.LifoAckQueue])
@settings(max_examples=60, deadline=None)
@given(script=steps)
def test_priorities_merge_backlog_and_new_puts_in_order(cls, script):
    sign = 1 if cls is ackqueue.AckQueue else -1
    ready: list[tuple[int, int]] = []  # (priority, seq)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "q.fs")
        q = cls(path)
        try:
            for seq, (op, priority) in enumerate(script):
                if op == "put":
                    q.put((priority, seq), priority=priority)
                    ready.append((priority, seq))
                    ready.sort(key=lambda ps: (ps[0], sign * ps[1]))
                elif op == "get":
                    if ready:
                        assert q.get_nowait() == ready.pop(0)
                    else:
                        with pytest.raises(ackqueue.Empty):
                            q.get_nowait()
                else:
                    q.close()
                    q = cls(path)
                assert q.qsize() == len(ready)
            assert [q.get_nowait() for _ in range(len(ready))] == ready
        finally:
            q.close()
