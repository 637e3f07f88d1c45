"""Opening and closing a file queue leaves nothing of it in memory: its storage, database and
connections are collected once the queue is closed and dropped."""

from __future__ import annotations

import gc
import os
import weakref

from polling import wait_until

import ackqueue


def test_open_work_close_cycles_leave_no_storage_db_or_connection_behind(tmp_path):
    path = os.path.join(tmp_path, "q.fs")
    left = []
    for n in range(20):
        q = ackqueue.AckQueue(path)
        q.put(n)
        with q.connect() as c:
            c.ack(c.get())
        store = q._store
        left += [weakref.ref(store.db), weakref.ref(store.db.storage), weakref.ref(store.writer)]
        q.close()
        del q, store, c

    def alive() -> list[tuple[int, str]]:
        gc.collect()
        return [(i // 3, type(ref()).__name__) for i, ref in enumerate(left) if ref() is not None]

    # The last ones may still be in the hands of a background thread for a moment.
    try:
        wait_until(lambda: not alive(), timeout=10, what="closed queues to be collected")
    except AssertionError:
        assert alive() == []


def test_a_read_only_look_leaves_no_storage_db_or_connection_behind(tmp_path):
    """``ackqueue stats`` and salvage read a file through a QueueFile, whose connection reads
    the entry log of a running writer (the log refers to its connection): closed, nothing of
    it stays in memory."""
    from ackqueue.cli.inspection import QueueFile

    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(3))
    left = []
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        c.ack(c.get())
        c.ack(c.get())  # through the log
        for _ in range(5):
            qf = QueueFile(path)
            assert qf.stats("default").stored == 1
            left += [weakref.ref(qf._db), weakref.ref(qf._storage), weakref.ref(qf._conn)]
            qf.close()
            del qf

    def alive() -> list[str]:
        gc.collect()
        return [type(ref()).__name__ for ref in left if ref() is not None]

    assert alive() == []
