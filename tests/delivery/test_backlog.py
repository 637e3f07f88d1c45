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


# -- taking backlog items out by key (ReadyIndex.withdraw) and looking ahead (peek) ---------


def stored_by_key(qpath, keys, **put):
    with ackqueue.AckQueue(qpath) as q:
        for k in keys:
            q.put(f"item {k}", key=k, **put)


def test_a_held_backlog_item_cannot_be_removed_by_key_and_the_rest_can(qpath):
    stored_by_key(qpath, ["k0", "k1", "k2", "k3"])
    with ackqueue.AckQueue(qpath) as q:
        c = q.connect()
        assert c.get() == "item k0"  # the backlog's first: the scan's cursor is on it
        with pytest.raises(ackqueue.KeyHeldError):
            q.remove("k0")
        assert c.get() == "item k1" and c.get() == "item k2"
        q.remove("k3")  # the backlog's last unread item
        assert q.qsize() == 0 and q.unacked_count() == 3
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        with pytest.raises(ackqueue.KeyHeldError):
            q.remove("k1")
    with ackqueue.AckQueue(qpath) as q:
        assert sorted(q.get() for _ in range(3)) == ["item k0", "item k1", "item k2"]
        assert q.qsize() == 0


def test_a_held_item_of_this_session_cannot_be_removed_while_the_backlog_is_unread(qpath):
    stored_by_key(qpath, ["old0", "old1"], priority=5)
    with ackqueue.AckQueue(qpath) as q:
        q.put("new", key="new", priority=0)  # first in line, ahead of the unread backlog
        c = q.connect()
        assert c.get() == "new"
        with pytest.raises(ackqueue.KeyHeldError):
            q.remove("new")
        assert q.qsize() == 2 and q.unacked_count() == 1
        assert [c.get(), c.get()] == ["item old0", "item old1"]


def test_a_group_merges_its_backlog_and_new_puts_in_order(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("old", group="g")
    with ackqueue.AckQueue(qpath) as q:
        q.put("new", group="g")
        c = q.connect()
        assert [c.get_nowait(), c.get_nowait()] == ["old", "new"]


def test_ungrouped_backlog_and_new_puts_go_out_in_order_beside_a_group(qpath):
    # With a group in play, gets go round the lanes, and the ungrouped lane is looked at
    # (peek) before it is taken from: its backlog and its new puts both hold a key then.
    with ackqueue.AckQueue(qpath) as q:
        q.put("old")
    with ackqueue.AckQueue(qpath) as q:
        q.put("new")
        q.put("grouped", group="g")
        c = q.connect()
        got = [c.get_nowait() for _ in range(3)]
        assert got.index("old") < got.index("new")
        assert sorted(got) == ["grouped", "new", "old"]
