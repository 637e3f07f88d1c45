"""The power-loss promise, seen at the system-call boundary.

docs/explanation/guarantees.rst promises that in the default, strict mode every call that
changes the queue file survives a power loss once it has returned. Only an fsync of the file,
made after the call's data was written, keeps that promise; so these tests wrap the fsync
calls themselves (``os.fsync``, and the module-level ``fsync`` ZODB's FileStorage calls) and
record, for each fsync of the queue file, how long the file was when it ran. A call kept its
promise if, before it returned, an fsync ran on a file that already held everything the call
wrote. Relaxed mode promises the same within its sync interval (once a second), and at close.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import transaction
import ZODB
from fsync_log import FsyncLog, watch_fsyncs
from persistent.mapping import PersistentMapping
from polling import wait_until

import ackqueue
from ackqueue.storage.filestorage import QueueFileStorage


@pytest.fixture
def fsyncs(qpath: str, monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    return watch_fsyncs(qpath, monkeypatch)


def _put(q: ackqueue.AckQueue) -> None:
    q.put("item")


def _put_many(q: ackqueue.AckQueue) -> None:
    q.put_many(["a", "b", "c"])


def _put_by_key(q: ackqueue.AckQueue) -> None:
    assert q.put("page", key="https://example.org/") is True


def _put_with_group(q: ackqueue.AckQueue) -> None:
    q.put("page", group="example.org")


def _plain_get(q: ackqueue.AckQueue) -> None:
    assert q.get_nowait() == "before"


def _ack(q: ackqueue.AckQueue) -> None:
    c = q.connect()
    c.ack(c.get_nowait())


def _ack_many(q: ackqueue.AckQueue) -> None:
    c = q.connect()
    c.ack_many(c.get_many(2))


def _counted_get(q: ackqueue.AckQueue) -> None:
    q.connect().get_nowait()  # with max_attempts, the delivery is counted on disk first


def _transaction(q: ackqueue.AckQueue) -> None:
    c = q.connect()
    with c.transaction():
        c.ack(c.get_nowait())
        q.put("follow-up")


def _delayed_nack(q: ackqueue.AckQueue) -> None:
    c = q.connect()
    c.nack(c.get_nowait(), delay=3600)


def _reject_one(q: ackqueue.AckQueue) -> None:
    c = q.connect()
    c.reject(c.get_nowait(), reason="poison")


def _requeue_dead(q: ackqueue.AckQueue) -> None:
    assert q.requeue_dead() == 1


def _purge_dead(q: ackqueue.AckQueue) -> None:
    assert q.purge_dead() == 1


# nack is left out: without max_attempts it writes nothing (held items come back at open anyway).
CALLS = {
    "put": _put,
    "put_many": _put_many,
    "put by key": _put_by_key,
    "put with group": _put_with_group,
    "plain get": _plain_get,
    "ack": _ack,
    "ack_many": _ack_many,
    "counted get": _counted_get,
    "reject": _reject_one,
    "transaction": _transaction,
    "delayed nack": _delayed_nack,
    "requeue_dead": _requeue_dead,
    "purge_dead": _purge_dead,
}
# What must be committed before the call (then it is not the call's own write).
SETUP = {"requeue_dead": _reject_one, "purge_dead": _reject_one}

OPTIONS: dict[str, dict[str, object]] = {"counted get": {"max_attempts": 3}}


def _prepared(qpath: str, **options: object) -> ackqueue.AckQueue:
    """A queue holding two items, committed before the call under test."""
    q = ackqueue.AckQueue(qpath, autopack=False, **options)  # type: ignore[arg-type]
    q.put_many(["before", "also before"])
    return q


def _measure(
    call: Callable[[ackqueue.AckQueue], None], q: ackqueue.AckQueue, qpath: str, fsyncs: FsyncLog
) -> tuple[int, int, int]:
    """Run ``call``; return the fsync mark before it, and the file's size before and after."""
    size_before = os.path.getsize(qpath)
    mark = fsyncs.mark()
    call(q)
    return mark, size_before, os.path.getsize(qpath)


@pytest.mark.parametrize("name", list(CALLS))
def test_strict_call_returns_only_after_an_fsync_covering_what_it_wrote(qpath, fsyncs, name):
    with _prepared(qpath, **OPTIONS.get(name, {})) as q:
        SETUP.get(name, lambda q: None)(q)
        mark, size_before, size_after = _measure(CALLS[name], q, qpath, fsyncs)
        # Nothing else runs meanwhile, so the call's commit ends where the file ends now.
        assert size_after > size_before, f"{name} wrote nothing to the queue file"
        assert fsyncs.covered_since(mark, size_after), (
            f"{name} returned before the queue file was fsynced up to {size_after} bytes: "
            f"fsyncs seen during the call covered {fsyncs.sizes[mark:]}"
        )


def test_strict_puts_from_threads_each_return_after_a_covering_fsync(qpath, fsyncs):
    """With group commit, another thread may run the fsync; it must still cover each put."""
    failures: list[str] = []
    with _prepared(qpath) as q:
        lock = threading.Lock()  # one put at a time measures its own commit's end exactly

        def produce(k: int) -> None:
            for i in range(20):
                with lock:
                    mark, _, size_after = _measure(lambda q, n=(k, i): q.put(n), q, qpath, fsyncs)
                if not fsyncs.covered_since(mark, size_after):
                    failures.append(f"put {(k, i)} returned before an fsync to {size_after}")

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    assert not failures, failures[:5]


def test_relaxed_put_is_fsynced_within_its_sync_interval(qpath, fsyncs):
    with _prepared(qpath, durability="relaxed") as q:
        mark, _, size_after = _measure(_put, q, qpath, fsyncs)
        # The promise is one second (the default interval); the margin is for a loaded machine.
        wait_until(
            lambda: fsyncs.covered_since(mark, size_after),
            timeout=10,
            what="the background fsync of a relaxed put",
        )


def test_relaxed_queue_fsyncs_everything_when_closed(qpath, fsyncs):
    q = _prepared(qpath, durability="relaxed")
    mark, _, size_after = _measure(_put, q, qpath, fsyncs)
    q.close()
    assert fsyncs.covered_since(mark, size_after), "close() left commits that were never fsynced"


@contextlib.contextmanager
def _zodb_on_queue_storage(qpath: str) -> Iterator[tuple[QueueFileStorage, Any, Any, Any]]:
    """The queue storage opened by ZODB alone (as the private server of a shared file opens
    it): the storage, its database, a transaction manager, and a root using it."""
    storage = QueueFileStorage(qpath, pack_keep_old=False)
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        yield storage, db, tm, db.open(transaction_manager=tm).root()
    finally:
        db.close()


def test_commits_after_a_pack_are_fsynced_on_the_packed_file(qpath, fsyncs):
    """The fsync's descriptor is kept from one commit to the next; a pack puts a new file in
    place, and the commits after it must be fsynced there, not on the file it replaced."""
    with _zodb_on_queue_storage(qpath) as (storage, db, tm, root):

        def commit(n: int) -> None:
            root["n"] = n
            with storage.deferring_sync():  # as the group committer commits
                tm.commit()
            storage.sync_through(storage.flushed())

        root["garbage"] = PersistentMapping(big="x" * 10_000)
        commit(0)  # the descriptor is made for the file as it is now
        del root["garbage"]
        commit(1)
        inode = os.stat(qpath).st_ino
        db.pack(time.time() + 1)
        assert os.stat(qpath).st_ino != inode, "the pack left the file in place"
        for n in range(2, 5):
            mark = fsyncs.mark()
            commit(n)
            size = os.path.getsize(qpath)
            assert fsyncs.covered_since(mark, size), (
                f"commit {n} after the pack returned before the packed file was fsynced up to "
                f"{size} bytes: fsyncs of it since covered {fsyncs.sizes[mark:]}"
            )


def test_a_commit_made_without_the_group_committer_is_fsynced_before_it_returns(qpath, fsyncs):
    """The private server of a shared file commits its clients' changes on the queue storage
    with ZODB's own commit, not inside ``deferring_sync``: each must be fsynced before it
    returns, as FileStorage's are; also in a thread whose earlier commit did defer its fsync
    (the group committer's, then another's)."""
    with _zodb_on_queue_storage(qpath) as (storage, _db, tm, root):

        def commit_covered(n: int) -> None:
            mark = fsyncs.mark()
            root["n"] = n
            tm.commit()
            size = os.path.getsize(qpath)
            assert fsyncs.covered_since(mark, size), (
                f"commit {n} returned before the file was fsynced up to {size} bytes: fsyncs "
                f"since covered {fsyncs.sizes[mark:]}"
            )

        for n in range(3):
            commit_covered(n)
        with storage.deferring_sync():  # as the group committer commits
            root["n"] = 3
            tm.commit()
        storage.sync_through(storage.flushed())
        commit_covered(4)


def test_closing_the_queue_closes_every_descriptor_of_its_file(qpath):
    def descriptors_of_file() -> int:
        ours = os.stat(qpath)
        found = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                st = os.stat(f"/proc/self/fd/{name}")
            except OSError:
                continue
            found += (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino)
        return found

    q = _prepared(qpath)
    q.put("synced")
    q.close()
    assert descriptors_of_file() == 0
