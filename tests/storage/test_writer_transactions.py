"""The writer connection's transaction manager commits by driving the writer's two-phase commit
itself, and behaves as the ``transaction`` package's own commit does: what is committed, what a
failed commit leaves, and when the package's commit is used instead."""

from __future__ import annotations

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from transaction.interfaces import TransactionFailedError
from ZODB.POSException import ConflictError

import ackqueue
from ackqueue.storage.commit import WriterTransactions
from ackqueue.storage.filestorage import QueueFileStorage
from ackqueue.storage.store import Store


class Plain(PersistentMapping):
    """No conflict resolution, so that a concurrent change must raise."""


def writer_manager() -> transaction.TransactionManager:
    return WriterTransactions()


def package_manager() -> transaction.TransactionManager:
    return transaction.TransactionManager(explicit=True)


MANAGERS = [writer_manager, package_manager]


@pytest.fixture
def db(tmp_path):
    database = ZODB.DB(QueueFileStorage(str(tmp_path / "w.fs")))
    yield database
    database.close()


def open_with(db, make):
    tm = make()
    conn = db.open(transaction_manager=tm)
    if isinstance(tm, WriterTransactions):
        tm.writer = conn
    return tm, conn


def test_a_stores_commits_do_not_go_through_the_packages_commit(tmp_path, monkeypatch):
    package_commits = []
    real_commit = transaction.Transaction.commit

    def counted(txn):
        package_commits.append(txn)
        return real_commit(txn)

    monkeypatch.setattr(transaction.Transaction, "commit", counted)
    path = str(tmp_path / "s.fs")
    store = Store.acquire(path, None)
    try:
        opened = len(package_commits)  # the database's creation: its own manager
        for n in range(5):
            store.run(lambda n=n: store.root().__setitem__("n", n))
        assert len(package_commits) == opened
    finally:
        store.release()
    store = Store.acquire(path, None)
    try:
        assert store.run(lambda: store.root()["n"]) == 4
    finally:
        store.release()


@pytest.mark.parametrize("make", MANAGERS)
def test_a_commit_stores_the_change_and_ends_the_transaction(db, make):
    tm, conn = open_with(db, make)
    tm.begin()
    conn.root()["obj"] = Plain(n=1)
    tm.commit()
    with pytest.raises(transaction.interfaces.NoTransaction):
        tm.get()  # explicit: nothing begun after a commit
    tm.begin()
    conn.root()["obj"]["n"] = 2
    tm.commit()
    other = db.open()
    try:
        assert other.root()["obj"]["n"] == 2
    finally:
        other.transaction_manager.abort()
        other.close()
    conn.close()


@pytest.mark.parametrize("make", MANAGERS)
def test_a_failed_commit_forgets_the_change_and_only_an_abort_may_follow(db, make):
    tm, conn = open_with(db, make)
    tm.begin()
    conn.root()["obj"] = Plain(n=0)
    tm.commit()
    tm.begin()
    mine = conn.root()["obj"]
    mine["n"]  # loaded at this revision
    tm2 = transaction.TransactionManager()
    theirs = db.open(transaction_manager=tm2)
    theirs.root()["obj"]["n"] = 1
    tm2.commit()
    mine["n"] = -1
    with pytest.raises(ConflictError):
        tm.commit()
    with pytest.raises(TransactionFailedError):
        tm.commit()
    with pytest.raises(TransactionFailedError):
        tm.get().join(conn)
    tm.abort()
    tm.begin()
    assert conn.root()["obj"]["n"] == 1  # the failed change is gone from memory too
    conn.root()["obj"]["n"] = 2  # and the storage takes the next commit
    tm.commit()
    tm2.begin()
    assert theirs.root()["obj"]["n"] == 2
    tm2.abort()
    theirs.close()
    conn.close()


def test_a_transaction_with_a_hook_is_committed_by_the_package(db):
    tm, conn = open_with(db, writer_manager)
    tm.begin()
    called = []
    tm.get().addBeforeCommitHook(called.append, ("before",))
    tm.get().addAfterCommitHook(lambda ok: called.append(ok))
    conn.root()["obj"] = Plain(n=1)
    tm.commit()
    assert called == ["before", True]
    conn.close()


def test_another_data_manager_in_the_transaction_is_committed_by_the_package(db):
    """A connection of another database, opened with the same manager, joins the same
    transaction: both commit, through the package's two-phase commit of both."""
    tm, conn = open_with(db, writer_manager)
    other_db = ZODB.DB(None)
    other = other_db.open(transaction_manager=tm)
    try:
        tm.begin()
        conn.root()["a"] = Plain(n=1)
        other.root()["b"] = Plain(n=2)
        tm.commit()
        tm.begin()
        conn.root()["a"]["n"] = 3
        other.root()["b"]["n"] = 4
        tm.commit()
        tm.begin()
        assert conn.root()["a"]["n"] == 3 and other.root()["b"]["n"] == 4
        tm.abort()
    finally:
        other.close()
        other_db.close()
        conn.close()


def test_a_stores_begins_call_the_writer_without_the_packages_synchronizer_walk(
    tmp_path, monkeypatch
):
    walks = []
    real_new_transaction = transaction._manager._new_transaction

    def counted(txn, synchs):
        walks.append(txn)
        return real_new_transaction(txn, synchs)

    monkeypatch.setattr(transaction._manager, "_new_transaction", counted)
    store = Store.acquire(str(tmp_path / "b.fs"), None)
    try:
        opened = len(walks)
        for n in range(5):
            store.run(lambda n=n: store.root().__setitem__("n", n))
        assert len(walks) == opened
        assert store.run(lambda: store.root()["n"]) == 4
    finally:
        store.release()


@pytest.mark.parametrize("make", MANAGERS)
def test_a_begin_sees_what_another_connection_committed(db, make):
    """The begin still calls the writer's newTransaction: invalidations are polled."""
    tm, conn = open_with(db, make)
    tm.begin()
    conn.root()["obj"] = Plain(n=1)
    tm.commit()
    tm.begin()
    assert conn.root()["obj"]["n"] == 1  # loaded into the writer's cache
    tm.abort()
    tm2 = transaction.TransactionManager()
    theirs = db.open(transaction_manager=tm2)
    theirs.root()["obj"]["n"] = 2
    tm2.commit()
    theirs.close()
    tm.begin()
    assert conn.root()["obj"]["n"] == 2
    with pytest.raises(transaction.interfaces.AlreadyInTransaction):
        tm.begin()
    tm.abort()
    conn.close()


def test_a_begin_with_another_synchronizer_is_the_packages(db, monkeypatch):
    """A second connection opened with the writer's manager: both are told of the begin."""
    tm, conn = open_with(db, writer_manager)
    other_db = ZODB.DB(None)
    other = other_db.open(transaction_manager=tm)
    told = []
    real = type(other).newTransaction

    def counted(self, txn, sync=True):
        told.append(self)
        return real(self, txn, sync)

    monkeypatch.setattr(type(other), "newTransaction", counted)
    try:
        tm.begin()
        assert set(map(id, told)) == {id(conn), id(other)}
        tm.abort()
    finally:
        other.close()
        other_db.close()
        conn.close()


def test_a_callers_db_closed_under_an_open_queue_closes_and_the_queue_says_so(tmp_path):
    """``ZODB.DB.close`` aborts every connection's manager, begun or not; the writer's is
    explicit, and raised ``NoTransaction`` there: the database stayed half closed, its file
    locked (``close`` is a no-op after its first call). Now it closes; the queue's next commit
    says the database was closed, and the file opens again in the same process."""
    path = str(tmp_path / "callers.fs")
    db = ZODB.DB(QueueFileStorage(path))
    q = ackqueue.AckQueue(db=db)
    q.put("kept")
    q.put("second")
    consumer = q.connect()
    held = consumer.get()
    db.close()  # raised NoTransaction before
    for operation in (lambda: q.put("after"), lambda: consumer.ack(held), q.get_nowait):
        with pytest.raises(ackqueue.StorageError, match=r"was closed \(db.close\(\)\) while a "
                           r"queue on it was open: close the queue before its database") as told:
            operation()
        assert told.value.__cause__ is not None  # ZODB's own error, for the traceback
    q.close()
    again = ZODB.DB(QueueFileStorage(path))  # the lock was let go: the storage was closed
    try:
        reopened = ackqueue.AckQueue(db=again)
        # Nothing of the failed commits was made; the hold went with the closed queue.
        assert [reopened.get_nowait() for _ in range(reopened.qsize())] == ["kept", "second"]
        reopened.close()
    finally:
        again.close()
