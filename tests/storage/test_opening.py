"""The ways to open a queue: a path (str or PathLike), in memory, or a caller's ZODB database."""

from __future__ import annotations

import pathlib

import transaction
import ZODB
from ZODB.FileStorage import FileStorage

import ackqueue


def test_path_may_be_a_pathlike(tmp_path):
    path = pathlib.Path(tmp_path) / "q.fs"
    with ackqueue.AckQueue(path) as q:
        q.put("x")
    assert path.exists()
    with ackqueue.AckQueue(str(path)) as q:
        assert q.get_nowait() == "x"


def test_in_memory_queue_works_and_is_independent_of_others():
    with ackqueue.AckQueue() as a, ackqueue.AckQueue() as b:
        a.put(1)
        with a.connect() as c:
            c.nack(c.get())
        assert (a.qsize(), b.qsize()) == (1, 0)
        assert a.get_nowait() == 1
    with ackqueue.AckQueue() as fresh:
        assert fresh.empty()


def test_queues_in_a_callers_database_leave_it_open_and_its_data_alone(qpath):
    db = ZODB.DB(FileStorage(qpath))
    try:
        with db.transaction() as conn:
            conn.root()["app"] = {"setting": 1}
        with ackqueue.AckQueue(db=db, name="jobs") as jobs:
            with ackqueue.LifoAckQueue(db=db, name="stack") as stack:
                jobs.put("j1")
                jobs.put("j2")
                stack.put("s1")
                stack.put("s2")
                assert stack.get() == "s2"
            assert jobs.get() == "j1"
        with db.transaction() as conn:  # the database is still open, the app's data intact
            assert conn.root()["app"] == {"setting": 1}
    finally:
        transaction.abort()
        db.close()
    with ackqueue.AckQueue(qpath, name="jobs") as jobs:
        assert jobs.get_nowait() == "j2"
        assert jobs.empty()
    with ackqueue.LifoAckQueue(qpath, name="stack") as stack:
        assert stack.get_nowait() == "s1"


def test_repr_names_the_queue_and_its_counts(qpath):
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        q.put(1)
        q.put(2)
        c = q.connect()
        c.get()
        text = repr(q)
        assert "jobs" in text and "1 ready" in text and "1 held" in text
        assert "holding 1" in repr(c)
    assert "closed" in repr(q)
