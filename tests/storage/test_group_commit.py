"""The group committer: many threads' changes share commits, and each caller returns once."""

from __future__ import annotations

import os
import random
import threading
import time
from contextlib import AbstractContextManager

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from polling import wait_until
from ZODB.POSException import ConflictError
from ZODB.POSException import StorageError as POSStorageError

import ackqueue
from ackqueue.errors import QueueClosedError
from ackqueue.storage import commit
from ackqueue.storage.commit import GroupCommitter
from ackqueue.storage.filestorage import QueueFileStorage
from ackqueue.storage.store import Store

THREADS = 16
CHANGES = 300


def test_every_change_of_many_threads_commits_once_and_its_caller_returns(tmp_path):
    """Callers arrive at every moment of a group's life (while it commits, while it is
    fsynced, while the next leader is being woken): each change is applied exactly once, each
    caller gets its own change's result, and none sleeps on (a lost wake-up would leave its
    thread alive past the deadline below)."""
    store = Store.acquire(str(tmp_path / "g.fs"), None)
    results: dict[int, list[int]] = {t: [] for t in range(THREADS)}
    failures: list[BaseException] = []

    def setup() -> None:
        store.root()["counts"] = PersistentMapping({t: 0 for t in range(THREADS)})

    store.run(setup)

    def worker(t: int) -> None:
        def bump() -> int:
            counts = store.root()["counts"]
            counts[t] += 1
            return int(counts[t])

        rng = random.Random(t)
        try:
            for _ in range(CHANGES):
                results[t].append(store.run(bump))
                # Uneven work between changes, holding the GIL as real callers do, so that
                # callers come back at every moment of a group's life: while it commits,
                # while it is fsynced, while the next leader waits for the GIL to wake up.
                sum(range(rng.randrange(3000)))
        except BaseException as exc:  # reported below: a thread's error must fail the test
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    try:
        assert not hung, f"callers never returned: {hung}"
        assert not failures
        for t in range(THREADS):
            assert results[t] == list(range(1, CHANGES + 1))  # each change applied once
        assert store.commits < 1 + THREADS * CHANGES  # and they did share commits
    finally:
        if not hung:
            store.release()


def test_a_commit_moves_the_writer_to_the_latest_commit_once(tmp_path):
    """Each commit of the writer connection polls the storage for other commits once (at its
    begin), not again when it completes: the second poll was CPU of every put and ack."""
    store = Store.acquire(str(tmp_path / "p.fs"), None)
    try:
        store.run(lambda: store.root().__setitem__("n", 0))
        writer = store.writer
        polls: list[object] = []
        poll = writer.newTransaction

        def counted(*args: object, **kw: object) -> None:
            polls.append(args)
            poll(*args, **kw)

        writer.newTransaction = counted  # the transaction manager calls it on the connection
        for i in range(10):
            store.run(lambda i=i: store.root().__setitem__("n", i))
        assert len(polls) == 10
        writer.newTransaction = poll
        assert store.run(lambda: store.root()["n"]) == 9
    finally:
        store.release()


# -- the committer alone, on a real FileStorage: durability, close, conflicts, failures ------


class GatedSyncer:
    """The real storage's deferred fsync, held at a gate the test opens, noting each mark."""

    def __init__(self, storage: QueueFileStorage, fail: BaseException | None = None) -> None:
        self.storage = storage
        self.fail = fail
        self.marks: list[int] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.synced: list[int] = []

    def deferring_sync(self) -> AbstractContextManager[None]:
        return self.storage.deferring_sync()

    def flushed(self) -> int:
        return self.storage.flushed()

    def sync_through(self, mark: int) -> None:
        self.marks.append(mark)
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        if self.fail is not None:
            raise self.fail
        self.storage.sync_through(mark)
        self.synced.append(mark)


class Described(Exception):
    """What the committer's ``describe_failure`` made of a storage failure."""


@pytest.fixture
def writer(tmp_path):
    """A real FileStorage database and its writer connection, as the store opens it."""
    storage = QueueFileStorage(str(tmp_path / "c.fs"))
    db = ZODB.DB(storage)
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(transaction_manager=tm)
    yield storage, db, conn, tm
    conn.close()
    db.close()


def committer_of(writer, syncer=None) -> GroupCommitter:
    storage, db, conn, tm = writer
    committer = GroupCommitter(tm, Described, syncer, last_commit=db.lastTransaction)
    committer.run(lambda: conn.root().__setitem__("n", 0))
    return committer


def in_thread(call) -> tuple[threading.Thread, list]:
    """Run ``call`` in a thread of its own; its outcome lands in the returned list."""
    outcome: list = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # checked by the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


def test_a_caller_returns_only_once_its_commit_is_fsynced(writer):
    storage, _db, conn, _tm = writer
    syncer = GatedSyncer(storage)
    committer = committer_of(writer, syncer)
    syncer.gate.clear()
    syncer.entered.clear()

    def change() -> str:
        conn.root()["n"] = 1
        return "done"

    thread, outcome = in_thread(lambda: committer.run(change))
    assert syncer.entered.wait(5)
    # Committed and handed to the OS, not yet on disk: the caller must still be waiting.
    assert outcome == []
    assert storage.unsynced()
    syncer.gate.set()
    thread.join(5)
    assert outcome == ["done"]
    assert syncer.marks[-1] == storage.flushed()  # the fsync covered this very commit
    assert not storage.unsynced()


def test_a_failed_fsync_fails_the_callers_of_its_group(writer):
    storage, _db, conn, _tm = writer
    syncer = GatedSyncer(storage)
    committer = committer_of(writer, syncer)
    syncer.fail = OSError(28, "No space left on device")
    with pytest.raises(Described) as failed:
        committer.run(lambda: conn.root().__setitem__("n", 1))
    assert failed.value.args[0] is syncer.fail
    syncer.fail = None
    assert committer.run(lambda: conn.root()["n"]) == 1  # the committer works on


def test_close_waits_for_the_commit_in_flight_and_refuses_the_rest(writer):
    """A change whose commit is under way when the queue closes is committed and fsynced
    before close() returns; a change waiting behind it, and any later one, is refused with
    QueueClosedError and never applied."""
    storage, _db, conn, _tm = writer
    syncer = GatedSyncer(storage)
    committer = committer_of(writer, syncer)
    applying, release = threading.Event(), threading.Event()
    applied: list[str] = []
    order: list[str] = []

    def slow() -> str:
        applying.set()
        assert release.wait(10)
        conn.root()["n"] = 1
        applied.append("slow")
        return "slow"

    def late() -> str:
        applied.append("late")
        return "late"

    leader, led = in_thread(lambda: committer.run(slow))
    assert applying.wait(5)
    waiter, waited = in_thread(lambda: committer.run(late))
    wait_until(lambda: len(committer._pending) == 1, what="the second change to wait")

    def close() -> None:
        committer.close()
        order.append("closed")

    closer, _ = in_thread(close)
    # close() must wait for the commit in flight: it blocks on the committer's idle condition
    wait_until(lambda: not closer.is_alive() or committer._idle._waiters, what="close to wait")
    syncer.gate.clear()
    syncer.entered.clear()
    release.set()
    assert syncer.entered.wait(5)  # the slow change is committed, its fsync held
    order.append("fsync released")
    syncer.gate.set()
    for thread in (leader, waiter, closer):
        thread.join(5)
        assert not thread.is_alive()
    assert led == ["slow"]
    assert order == ["fsync released", "closed"]
    assert syncer.synced and not storage.unsynced()
    assert len(waited) == 1 and isinstance(waited[0], QueueClosedError)
    with pytest.raises(QueueClosedError):
        committer.run(late)
    assert applied == ["slow"]


def test_changes_that_wait_together_commit_together_and_a_lone_one_after_is_not_held(writer):
    """Changes that arrive during a commit share the next one; after such a group, a caller
    alone waits a moment for company (GATHER_SECONDS) but returns without it."""
    _storage, _db, conn, _tm = writer
    committer = committer_of(writer, None)
    before = committer.commits
    applying, release = threading.Event(), threading.Event()

    def slow() -> int:
        applying.set()
        assert release.wait(10)
        conn.root()["n"] += 1
        return int(conn.root()["n"])

    def bump() -> int:
        conn.root()["n"] += 1
        return int(conn.root()["n"])

    leader, led = in_thread(lambda: committer.run(slow))
    assert applying.wait(5)
    followers = [in_thread(lambda: committer.run(bump)) for _ in range(2)]
    wait_until(lambda: len(committer._pending) == 2, what="two changes to wait")
    release.set()
    for thread, _ in [(leader, led), *followers]:
        thread.join(5)
        assert not thread.is_alive()
    assert led == [1]
    assert sorted(outcome[0] for _, outcome in followers) == [2, 3]
    assert committer.commits == before + 2  # the two waiting changes shared one commit
    lone, alone = in_thread(lambda: committer.run(bump))
    lone.join(5)
    assert not lone.is_alive(), "a lone caller waited for company that never came"
    assert alone == [4]
    assert committer.commits == before + 3


def conflicting(db, value):
    """Commit ``n = value`` from another connection: the writer's next commit of the root
    then conflicts with it."""
    tm = transaction.TransactionManager()
    other = db.open(transaction_manager=tm)
    try:
        tm.begin()
        other.root()["n"] = value
        tm.commit()
    finally:
        other.close()


def test_a_write_conflict_is_retried_and_the_change_applied_again(writer):
    """The change's own error of the conflicting attempt is forgotten: the retry succeeded."""
    _storage, db, conn, _tm = writer
    committer = committer_of(writer, None)
    attempts: list[int] = []

    def bump() -> int:
        attempts.append(1)
        conn.root()["n"] += 1
        if len(attempts) == 1:
            conflicting(db, 100)
            raise ValueError("stale view")  # the change fails alone on this attempt
        return int(conn.root()["n"])

    assert committer.run(bump) == 101
    assert len(attempts) == 2
    assert committer.run(lambda: conn.root()["n"]) == 101


def test_repeated_conflicts_give_up_with_the_last_one_named(writer, monkeypatch):
    monkeypatch.setattr(commit, "MAX_CONFLICT_RETRIES", 3)
    _storage, db, conn, _tm = writer
    committer = committer_of(writer, None)
    attempts: list[int] = []

    def bump() -> None:
        attempts.append(1)
        conn.root()["n"] += 1
        conflicting(db, len(attempts) * 10)

    with pytest.raises(Described) as failed:
        committer.run(bump)
    gave_up = failed.value.args[0]
    assert isinstance(gave_up, ConflictError) and "gave up" in str(gave_up)
    assert isinstance(gave_up.__cause__, ConflictError)
    assert len(attempts) == 3
    assert committer.run(lambda: conn.root()["n"]) == 30  # nothing of the change was kept


def test_a_failed_commit_is_described_to_its_caller_and_nothing_of_it_kept(writer):
    _storage, _db, conn, _tm = writer
    committer = committer_of(writer, None)

    def unpicklable() -> None:
        conn.root()["n"] = 1
        conn.root()["lock"] = threading.Lock()

    with pytest.raises(Described) as failed:
        committer.run(unpicklable)
    assert isinstance(failed.value.args[0], TypeError)
    assert committer.run(lambda: dict(conn.root())) == {"n": 0}


def test_a_storage_error_inside_a_change_fails_its_commit(writer):
    """ZODB's StorageError raised by a change (a ZEO server away) is the storage's fault: the
    commit fails and is described, not taken as the change's own error."""
    _storage, _db, conn, _tm = writer
    committer = committer_of(writer, None)

    def away() -> None:
        conn.root()["n"] = 1
        raise POSStorageError("server away")

    with pytest.raises(Described):
        committer.run(away)
    assert committer.run(lambda: conn.root()["n"]) == 0


def test_an_interrupt_inside_a_change_reaches_its_caller_and_leaves_the_committer_usable(writer):
    storage, _db, conn, _tm = writer
    syncer = GatedSyncer(storage)
    committer = committer_of(writer, syncer)

    def interrupted() -> None:
        conn.root()["n"] = 1
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        committer.run(interrupted)
    assert committer.run(lambda: conn.root()["n"]) == 0
    committer.close()  # returns: no group is left counted as in flight


class HeldSyncer(GatedSyncer):
    """Each fsync held at a gate of its own, released in the order the test chooses."""

    def __init__(self, storage: QueueFileStorage) -> None:
        super().__init__(storage)
        self.gates: list[threading.Event] = []

    def sync_through(self, mark: int) -> None:
        gate = threading.Event()
        self.gates.append(gate)
        assert gate.wait(10), "the test never released this fsync"
        self.storage.sync_through(mark)
        self.synced.append(mark)


def test_close_waits_for_every_group_being_fsynced(writer):
    """Two groups committed, both being fsynced: close() returns only after the second fsync
    too (the storage is closed right after, under it)."""
    storage, _db, conn, _tm = writer
    syncer = HeldSyncer(storage)
    committer = committer_of(writer, None)
    committer._syncer = syncer
    order: list[str] = []
    first, _ = in_thread(lambda: committer.run(lambda: conn.root().__setitem__("n", 1)))
    wait_until(lambda: len(syncer.gates) == 1, what="the first group's fsync")
    second, _ = in_thread(lambda: committer.run(lambda: conn.root().__setitem__("n", 2)))
    wait_until(lambda: len(syncer.gates) == 2, what="the second group's fsync")

    def close() -> None:
        committer.close()
        order.append("closed")

    closer, _ = in_thread(close)
    wait_until(lambda: not closer.is_alive() or committer._idle._waiters, what="close to wait")
    syncer.gates[0].set()
    first.join(5)
    # notify_all took the closer off the waiters: it either waits again or has returned
    wait_until(lambda: not closer.is_alive() or committer._idle._waiters, what="close to wait")
    order.append("second released")
    syncer.gates[1].set()
    for thread in (second, closer):
        thread.join(5)
        assert not thread.is_alive()
    assert order == ["second released", "closed"]
    assert not storage.unsynced()


class RecordedHooks:
    """The commit hooks (counts.py keeps its counts through them), noting each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin(self) -> None:
        self.calls.append("begin")

    def before_commit(self) -> None:
        self.calls.append("before_commit")

    def committed(self) -> None:
        self.calls.append("committed")


def test_the_commit_hooks_run_around_each_attempt_and_committed_only_after_success(writer):
    _storage, db, conn, tm = writer
    hooks = RecordedHooks()
    committer = GroupCommitter(tm, Described, None, hooks)
    attempts: list[int] = []

    def bump() -> None:
        attempts.append(1)
        conn.root()["n"] = len(attempts)
        if len(attempts) == 1:
            conflicting(db, 100)

    committer.run(lambda: conn.root().__setitem__("n", 0))
    hooks.calls.clear()
    committer.run(bump)
    assert hooks.calls == ["begin", "before_commit", "begin", "before_commit", "committed"]


def test_a_change_that_fails_partway_changes_nothing_and_the_rest_of_its_group_commits(writer):
    """A change that raises after it edited part of what it edits fails alone, and nothing of
    it is committed: its earlier edits went in with the rest of its group (a review: a batch
    put on a priority queue whose items do not compare raised, and its first items were
    stored anyway, one of them holding its key for good)."""
    _storage, db, conn, _tm = writer
    committer = committer_of(writer)
    applying, release = threading.Event(), threading.Event()

    def slow() -> None:  # holds the committer while the two changes below queue up
        applying.set()
        assert release.wait(10)

    def half_then_fail() -> None:
        conn.root()["half"] = "written before the failure"
        raise ValueError("the change's own fault")

    def whole() -> str:
        conn.root()["whole"] = "written"
        return "done"

    leader, _ = in_thread(lambda: committer.run(slow))
    assert applying.wait(5)
    failing, failed = in_thread(lambda: committer.run(half_then_fail))
    passing, passed = in_thread(lambda: committer.run(whole))
    wait_until(lambda: len(committer._pending) == 2, 10, "both changes waiting: one group")
    release.set()
    for thread in (leader, failing, passing):
        thread.join(10)
    assert isinstance(failed[0], ValueError) and passed == ["done"]
    check = db.open()
    try:
        assert check.root().get("whole") == "written"
        assert "half" not in check.root()
    finally:
        check.close()


def test_a_queue_files_next_put_commits_while_the_one_before_is_being_fsynced(
    tmp_path, monkeypatch
):
    """Strict durability on a queue file: a group's fsync runs after its commit, outside the
    commit lock (the store hands its file to the committer as the syncer), so a second put is
    written while the first is still being fsynced, and each returns once its own is on disk.
    An fsync inside the commit would hold the second put back until the first's was done."""
    path = str(tmp_path / "q.fs")
    real_fsync = os.fsync
    entered, gate = threading.Event(), threading.Event()

    def slow_first_fsync(fd: int) -> None:
        if threading.current_thread().name == "first put" and not entered.is_set():
            entered.set()
            gate.wait(30)
        real_fsync(fd)

    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put("warm")
        monkeypatch.setattr(os, "fsync", slow_first_fsync)
        first = threading.Thread(target=q.put, args=("first",), name="first put")
        second = threading.Thread(target=q.put, args=("second",))
        try:
            first.start()
            assert entered.wait(10)
            size = os.path.getsize(path)  # the first put is written; its fsync waits
            second.start()
            wait_until(lambda: os.path.getsize(path) > size, timeout=10,
                       what="the second put to be written during the first's fsync")
            assert first.is_alive()  # still waiting for its fsync: it has not returned
        finally:
            gate.set()
            first.join(10)
            second.join(10)
        assert [q.get_nowait() for _ in range(3)] == ["warm", "first", "second"]
