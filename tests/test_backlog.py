"""Items stored by an earlier session (the backlog) are delivered in order, also after a pack."""

from __future__ import annotations

import threading

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
