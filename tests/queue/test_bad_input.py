"""Bad input gets a clear error, changes nothing, and leaves the queue working."""

from __future__ import annotations

import os
import threading

import pytest
import transaction
import ZODB
from conftest import spawn_child
from ZODB.FileStorage import FileStorage

import ackqueue


def local_class_instance():
    class Local:
        pass

    return Local()


UNPICKLABLE = [
    pytest.param(lambda: lambda x: x, id="lambda"),
    pytest.param(threading.Lock, id="lock"),
    pytest.param(local_class_instance, id="local-class"),
    pytest.param(lambda: {"nested": [1, threading.Lock()]}, id="nested-lock"),
]


@pytest.mark.parametrize("make", UNPICKLABLE)
@pytest.mark.parametrize("cls", [ackqueue.AckQueue, ackqueue.LifoAckQueue])
def test_unpicklable_item_is_refused_at_put_and_nothing_is_stored(cls, make, qpath):
    with cls(qpath, maxsize=2) as q:
        q.put("before")
        with pytest.raises(ackqueue.UnpicklableItemError) as raised:
            q.put(make())
        assert isinstance(raised.value, TypeError)
        assert "pickle" in str(raised.value)
        assert (q.qsize(), q.unfinished_tasks, q.full()) == (1, 1, False)
        with pytest.raises(TypeError):
            q.put_nowait(make())
        q.put("after")
        assert q.full()
        got = [q.get(), q.get()]
        q.task_done()
        q.task_done()
        q.join()
        q.put("next session")
    with cls(qpath) as q:
        assert q.qsize() == 1
        assert q.get_nowait() == "next session"
    assert got == (["before", "after"] if cls is ackqueue.AckQueue else ["after", "before"])


def test_unpicklable_item_in_a_priority_queue_is_refused(qpath):
    with ackqueue.PriorityAckQueue(qpath) as q:
        q.put((2, "b"))
        with pytest.raises(ackqueue.UnpicklableItemError):
            q.put((1, threading.Lock()))
        q.put((1, "a"))
        assert [q.get(), q.get()] == [(1, "a"), (2, "b")]
        assert q.empty()


def test_incomparable_item_in_a_priority_queue_is_refused_like_the_stdlib(qpath):
    with ackqueue.PriorityAckQueue(qpath) as q:
        q.put(1)
        with pytest.raises(TypeError):
            q.put("one")
        assert q.qsize() == 1
        assert q.get() == 1


@pytest.mark.parametrize("priority", ["high", 1.5, None, True])
@pytest.mark.parametrize("call", ["put", "put_many"])
def test_a_priority_that_is_not_an_int_is_refused_saying_so(qpath, priority, call):
    with ackqueue.AckQueue(qpath) as q:
        with pytest.raises(TypeError, match="priority must be an int"):
            if call == "put":
                q.put("x", priority=priority)
            else:
                q.put_many(["x"], priority=priority)
        assert q.qsize() == 0


def test_unpicklable_item_does_not_stall_a_blocked_getter(qpath):
    with ackqueue.AckQueue(qpath) as q:
        got = []
        t = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
        t.start()
        with pytest.raises(ackqueue.UnpicklableItemError):
            q.put(threading.Lock())
        q.put("fine")
        t.join(10)
        assert got == ["fine"]


def test_acking_what_is_not_held_raises_value_error(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        with pytest.raises(ValueError):
            c.ack("a")
        with pytest.raises(ackqueue.NotHeldError):
            c.ack_id(12345)
        item = c.get()
        c.ack(item)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack(item)  # double ack
        assert (q.qsize(), q.unacked_count()) == (0, 0)


def test_foreign_file_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "notes.txt"
    content = b"this is somebody's shopping list, not a FileStorage\n" * 10
    path.write_bytes(content)
    with pytest.raises(ackqueue.NotAQueueFileError) as raised:
        ackqueue.AckQueue(str(path))
    assert str(path) in str(raised.value)
    assert isinstance(raised.value, OSError)
    assert path.read_bytes() == content
    with pytest.raises(ackqueue.NotAQueueFileError):  # and again: nothing was left locked
        ackqueue.AckQueue(str(path))


def test_filestorage_of_another_application_is_refused(qpath):
    db = ZODB.DB(FileStorage(qpath))
    with db.transaction() as conn:
        conn.root()["accounts"] = {"alice": 10}
    db.close()
    size = os.path.getsize(qpath)
    with pytest.raises(ackqueue.NotAQueueFileError) as raised:
        ackqueue.AckQueue(qpath)
    assert qpath in str(raised.value)
    assert "accounts" in str(raised.value)
    assert os.path.getsize(qpath) == size
    db = ZODB.DB(FileStorage(qpath, read_only=True))
    try:
        conn = db.open()
        assert sorted(conn.root()) == ["accounts"]
        conn.close()
    finally:
        transaction.abort()
        db.close()


LOCK_HOLDER = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1])
q.put("from the child")
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""


def test_file_locked_by_a_live_process_is_refused_naming_file_and_pid(qpath):
    child = spawn_child(LOCK_HOLDER, qpath)
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(ackqueue.QueueLockedError) as raised:
            ackqueue.AckQueue(qpath)
        message = str(raised.value)
        assert qpath in message
        assert str(child.pid) in message
        with pytest.raises(ackqueue.QueueLockedError):
            ackqueue.AckQueue(qpath, name="other")
    finally:
        child.communicate("\n", timeout=30)
    assert child.returncode == 0
    with ackqueue.AckQueue(qpath) as q:  # the lock is gone with the process
        assert q.get_nowait() == "from the child"


def test_same_queue_opened_twice_in_one_process_is_a_clear_error(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put(1)
        with pytest.raises(ackqueue.AckQueueError, match="already open"):
            ackqueue.AckQueue(qpath)
        with pytest.raises(ackqueue.AckQueueError, match="already open"):
            ackqueue.AckQueue(os.path.join(os.path.dirname(qpath), ".", "queue.fs"))
        q.put(2)
        assert q.get() == 1
    with ackqueue.AckQueue(qpath) as q:
        assert q.get_nowait() == 2


def test_two_names_on_one_file_in_one_process_both_work(qpath):
    with ackqueue.AckQueue(qpath, name="a") as a, ackqueue.LifoAckQueue(qpath, name="b") as b:
        for n in range(3):
            a.put(("a", n))
            b.put(("b", n))
        assert a.get() == ("a", 0)
        assert b.get() == ("b", 2)
        with a.connect() as c:
            c.get()
    with ackqueue.AckQueue(qpath, name="a") as a:
        assert [a.get_nowait(), a.get_nowait()] == [("a", 1), ("a", 2)]
        with ackqueue.LifoAckQueue(qpath, name="b") as b:
            assert b.qsize() == 2
    with ackqueue.LifoAckQueue(qpath, name="b") as b:
        assert [b.get_nowait(), b.get_nowait()] == [("b", 1), ("b", 0)]
        assert a.closed


@pytest.mark.parametrize(
    "made_by, opened_as",
    [
        (ackqueue.AckQueue, ackqueue.LifoAckQueue),
        (ackqueue.LifoAckQueue, ackqueue.AckQueue),
        (ackqueue.AckQueue, ackqueue.PriorityAckQueue),
    ],
)
def test_reopening_with_the_wrong_class_is_a_clear_error(made_by, opened_as, qpath):
    with made_by(qpath) as q:
        q.put(1)
    with pytest.raises(ackqueue.NotAQueueFileError, match=opened_as.__name__):
        opened_as(qpath)
    with made_by(qpath) as q:  # the failed open left nothing locked or claimed
        assert q.get_nowait() == 1


def test_missing_directory_is_a_clear_error(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "q.fs"
    with pytest.raises(ackqueue.StorageError, match="does not exist") as raised:
        ackqueue.AckQueue(str(path))
    assert str(path.parent) in str(raised.value)


def test_a_queue_dropped_without_close_can_be_opened_again(qpath):
    # queue.Queue code never calls close(): a function that opens the queue, uses it and
    # returns must be callable twice in one process.
    def session(item):
        q = ackqueue.AckQueue(qpath)
        q.put(item)
        return q.qsize()

    assert session("first") == 1
    assert session("second") == 2
    with ackqueue.AckQueue(qpath) as q:
        assert [q.get_nowait(), q.get_nowait()] == ["first", "second"]


# -- constructor arguments: each a clear error at construction, or the documented conversion --

BAD_ARGUMENTS = [
    pytest.param((), {"maxsize": "10"}, TypeError, "maxsize must be an int", id="maxsize-str"),
    pytest.param(("jobs",), {}, TypeError, "name is given by keyword: name='jobs'",
                 id="name-as-maxsize"),
    pytest.param((), {"maxsize": True}, TypeError, "maxsize must be an int", id="maxsize-bool"),
    pytest.param((), {"name": 5}, TypeError, "name must be a str", id="name-int"),
    pytest.param((), {"name": ""}, ValueError, "name must not be empty", id="name-empty"),
    pytest.param((), {"shared": "yes"}, TypeError, "shared must be True, False or None",
                 id="shared-str"),
    pytest.param((), {"autopack": "no"}, TypeError, "autopack must be True or False",
                 id="autopack-str"),
    pytest.param((), {"clock": 5}, TypeError, "clock must be a function", id="clock-int"),
    pytest.param((), {"db": "q.fs"}, TypeError, "db must be a ZODB.DB", id="db-str"),
    pytest.param((), {"max_attempts": True}, ValueError, "max_attempts", id="attempts-bool"),
    pytest.param((), {"ack_timeout": "5"}, ValueError, "ack_timeout must be", id="lease-str"),
    pytest.param((), {"session_timeout": "5"}, ValueError, "session_timeout must be",
                 id="session-str"),
    pytest.param((), {"unique": "sometimes"}, ValueError, "unique must be", id="unique-word"),
]


@pytest.mark.parametrize(("args", "options", "error", "says"), BAD_ARGUMENTS)
@pytest.mark.parametrize("cls", [ackqueue.AckQueue, ackqueue.PriorityAckQueue])
def test_a_bad_constructor_argument_is_refused_before_anything_opens(
    cls, qpath, args, options, error, says
):
    with pytest.raises(error, match=says):
        cls(qpath, *args, **options)
    assert not os.path.exists(qpath)
    with cls(qpath) as q:  # nothing was left claimed or locked
        q.put(1)


def test_a_queues_options_can_be_read_back(qpath):
    with ackqueue.AckQueue(qpath, max_attempts=3, ack_timeout=7.5) as q:
        assert (q.max_attempts, q.ack_timeout) == (3, 7.5)
    with ackqueue.AckQueue(qpath) as q:
        assert (q.max_attempts, q.ack_timeout) == (None, None)


def test_an_async_queue_refuses_a_bad_argument_the_same_way(qpath):
    from ackqueue.aio import AsyncAckQueue

    before = threading.active_count()
    with pytest.raises(TypeError, match="name is given by keyword"):
        AsyncAckQueue(qpath, "jobs")
    assert threading.active_count() == before and not os.path.exists(qpath)


@pytest.mark.parametrize(("path", "error", "says"), [
    (5, TypeError, "path must be a file path"),
    ("", ValueError, "path must not be empty"),
])
def test_a_path_of_the_wrong_kind_is_refused_saying_what_to_give(path, error, says):
    with pytest.raises(error, match=says):
        ackqueue.AckQueue(path)


def test_a_path_and_a_db_together_are_refused(qpath):
    db = ZODB.DB(None)
    try:
        with pytest.raises(ValueError, match="not both"):
            ackqueue.AckQueue(qpath, db=db)
    finally:
        db.close()


def test_tilde_is_expanded_and_bytes_and_pathlike_paths_name_the_same_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with ackqueue.AckQueue("~/jobs.fs") as q:
        q.put("by tilde")
    assert (tmp_path / "jobs.fs").exists() and not (tmp_path / "~").exists()
    with ackqueue.AckQueue(os.fsencode(tmp_path / "jobs.fs")) as q:  # type: ignore[arg-type]
        q.put("by bytes")
    with ackqueue.AckQueue("jobs.fs") as q:  # a bare name: in the working directory
        assert q.qsize() == 2
    with ackqueue.AckQueue(tmp_path / "jobs.fs") as q:
        assert [q.get_nowait(), q.get_nowait()] == ["by tilde", "by bytes"]


def test_a_batch_or_block_that_fails_inside_its_commit_stores_none_of_its_items(tmp_path):
    """A priority queue's items must compare: an empty one finds out inside the commit, after
    the first items of a batch were written. Those were committed anyway, though the call
    raised (and after a reopen the queue held them; a key put so stayed taken for good)."""
    path = str(tmp_path / "q.fs")

    def block(q: ackqueue.PriorityAckQueue) -> None:
        with q.transaction():
            q.put(5, key="a")
            q.put("x")

    for attempt in (
        lambda q: q.put_many([5, "x"]),
        lambda q: q.put_many([5, "x"], keys=["a", "b"]),
        block,
    ):
        with ackqueue.PriorityAckQueue(path) as q:
            with pytest.raises(TypeError):
                attempt(q)
            assert q.qsize() == 0
        with ackqueue.PriorityAckQueue(path) as q:
            assert q.qsize() == 0  # nothing of it was stored
            assert q.put(6, key="a") is True  # its key is free
            assert q.get_nowait() == 6
