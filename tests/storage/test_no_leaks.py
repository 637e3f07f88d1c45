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
