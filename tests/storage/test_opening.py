"""The ways to open a queue: a path (str or PathLike), in memory, or a caller's ZODB database."""

from __future__ import annotations

import contextlib
import gc
import os
import pathlib

import pytest
import transaction
import ZODB
from ZODB.DemoStorage import DemoStorage
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.FileStorage import packed_version

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


def test_a_failed_open_lets_go_of_the_file_while_its_error_is_still_held(tmp_path):
    """ZODB's FileStorage takes the ``.lock`` file first and raises later, on a damaged file
    say, without letting go; the half-built storage, kept alive by the error's traceback and
    the reference cycles of its frames, would hold the lock until the collector ran, and every
    open meanwhile was refused as "open in another process" (this process). The ``.lock`` file
    is one an earlier session left, as any closed queue leaves it."""
    path = tmp_path / "q.fs"
    path.write_bytes(packed_version + b"\xff" * 200)  # a damaged first transaction
    (tmp_path / "q.fs.lock").write_bytes(b"")
    errors = []
    gc.disable()  # no collection may free the first try's half-built storage
    try:
        for _ in range(2):
            with pytest.raises(ackqueue.DamagedFileError) as raised:
                ackqueue.AckQueue(str(path))
            errors.append(raised.value)  # held, as a caller logging it holds it
    finally:
        gc.enable()
    assert all(str(path) in str(error) for error in errors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.fs", "q.fs.lock"]
    assert open_beside(tmp_path) == []  # nor its data file, scratch file or file pool


def open_beside(directory: pathlib.Path) -> list[str]:
    """The files in ``directory`` this process has a descriptor of (Linux's /proc)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(directory)):
                found.append(target)
    return found
