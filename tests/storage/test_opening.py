"""The ways to open a queue: a path (str or PathLike), in memory, or a caller's ZODB database."""

from __future__ import annotations

import pathlib

import pytest
import transaction
import ZODB
from ZODB.DemoStorage import DemoStorage
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
        assert "in memory" in repr(fresh)


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


def test_a_callers_database_is_one_store_where_each_name_opens_once(qpath):
    """Every queue on one caller's database shares its store (one writer): the same name twice
    is refused, naming that database, while another name opens beside it."""
    db = ZODB.DB(FileStorage(qpath))
    try:
        with ackqueue.AckQueue(db=db, name="jobs") as jobs:
            with pytest.raises(ackqueue.AckQueueError, match="already open") as refused:
                ackqueue.AckQueue(db=db, name="jobs")
            assert repr(db) in str(refused.value)
            with ackqueue.AckQueue(db=db, name="other") as other:
                jobs.put("j")
                other.put("o")
                assert (jobs.get_nowait(), other.get_nowait()) == ("j", "o")
    finally:
        db.close()


def test_two_callers_databases_keep_their_queues_apart(tmp_path):
    """A store per caller's database: the default queue of each is its own, and what is put
    into one is stored in that database only."""
    paths = [str(tmp_path / "first.fs"), str(tmp_path / "second.fs")]
    dbs = [ZODB.DB(FileStorage(path)) for path in paths]
    try:
        first, second = (ackqueue.AckQueue(db=db) for db in dbs)
        with first, second:
            first.put("into the first")
            second.put("into the second")
            assert (first.qsize(), second.qsize()) == (1, 1)
    finally:
        for db in dbs:
            db.close()
    for path, item in zip(paths, ["into the first", "into the second"], strict=True):
        with ackqueue.AckQueue(path) as q:
            assert [q.get_nowait() for _ in range(q.qsize())] == [item]


def test_a_callers_database_on_a_storage_no_engine_knows_holds_a_queue():
    """A DemoStorage is no engine's (zodburi's catch-all takes it): a queue on it works, in
    one process."""
    db = ZODB.DB(DemoStorage())
    try:
        with ackqueue.AckQueue(db=db) as q:
            assert not q.shared
            q.put("x")
            with q.connect() as c:
                item = c.get_nowait()
                assert item == "x"
                c.ack(item)
            assert q.qsize() == 0
    finally:
        db.close()


def test_a_failed_commit_on_a_callers_open_database_is_not_called_a_closed_one(qpath):
    """The message for a caller's database closed under its queue is for that alone: a commit
    that fails otherwise (here a read-only storage) says what failed."""
    with ackqueue.AckQueue(qpath) as q:
        q.put("made")
    db = ZODB.DB(FileStorage(qpath, read_only=True))
    try:
        with ackqueue.AckQueue(db=db) as q:
            with pytest.raises(ackqueue.StorageError) as failed:
                q.put("refused")
            assert "ReadOnlyError" in str(failed.value)
            assert "was closed" not in str(failed.value)
            assert failed.value.__cause__ is not None  # ZODB's own error, for the traceback
    finally:
        db.close()
