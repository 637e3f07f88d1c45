"""Counts kept in transaction metadata (storage/counts.py), checked fast and in-process: a
copy of the queue file taken while the writer runs is what ``kill -9`` would leave (every
commit is flushed to the OS before put or ack returns), so opening the copy is opening after
a crash, and a read-only reader of the copy is ``ackqueue stats`` on it.

The kill campaigns of test_counts.py check the same with real SIGKILLs, in seconds; these run
in the mutation run's fast tests."""

from __future__ import annotations

import gc
import logging
import shutil
import time

import pytest
import ZODB
from conftest import stored_counts
from ZODB import BaseStorage
from ZODB.POSException import ConflictError

import ackqueue
from ackqueue.records import ROOT_KEY
from ackqueue.storage import counts
from ackqueue.storage.filestorage import QueueFileStorage

NAMES = ("default", "other")


def crash_image(path: str, into: str) -> str:
    """The file as a kill -9 would leave it now (no index: the opener scans the file)."""
    shutil.copyfile(path, into)
    return into


def test_the_writer_keeps_each_queues_count_off_its_commits_and_folds_it_every_so_often(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(counts, "FOLD_EVERY", 5)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        record = q._book.record
        assert not record.counted_in_log  # from the first change on: an open writes nothing
        lags = []
        for i in range(13):
            if i == 3:  # opening a queue folds only its own count: the others' cadence holds
                ackqueue.AckQueue(path, name="other").close()
            q.put(i)
            assert record.counted_in_log
            lags.append(i + 1 - record.length())
        # not written by every put, and folded within every FOLD_EVERY commits
        assert all(0 <= lag < 5 for lag in lags), lags
        assert any(lag > 0 for lag in lags) and lags.count(0) >= 2, lags
        assert q.qsize() == 13
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == 13
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        record = db.open().root()[ROOT_KEY]["default"]
        assert not record.counted_in_log and record.length() == 13  # folded at close
    finally:
        db.close()


@pytest.mark.parametrize("autopack", [True, False])
def test_a_pack_keeps_what_a_reader_adds_to_the_folded_counts(tmp_path, monkeypatch, autopack):
    """``pack()`` folds the counts first and packs up to that fold, with automatic packing
    (its packer packs) or without (the store packs the database itself)."""
    monkeypatch.setattr(counts, "FOLD_EVERY", 1000)  # only the pack folds
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=autopack) as q:
        c = q.connect()
        for i in range(20):
            q.put(i)
        for _ in range(5):
            c.ack(c.get())
        q.pack()
        for i in range(3):
            q.put(i)
        found = stored_counts(crash_image(path, str(tmp_path / "image.fs")))
        assert found["default"] == (18, 18)
        assert q.qsize() == 18


def test_a_clean_close_and_a_crash_image_open_warn_of_nothing(tmp_path, caplog):
    """Folding at close and settling a crash image's counts are routine: a warning there
    ("could not write the count", "recounting", "stored count was") would cry wolf."""
    path = str(tmp_path / "q.fs")
    with caplog.at_level(logging.WARNING, logger="ackqueue"):
        with ackqueue.AckQueue(path) as q:
            c = q.connect()
            for i in range(6):
                q.put(i)
            c.ack(c.get())
            image = crash_image(path, str(tmp_path / "image.fs"))
        with ackqueue.AckQueue(image) as q:
            assert q.qsize() == 5
        with ackqueue.AckQueue(path):
            pass  # opened and closed with no change since its fold at open
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_queue_closed_and_reopened_while_its_file_stays_open_keeps_its_count(tmp_path):
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, name="other"):  # keeps the file's store open throughout
        q = ackqueue.AckQueue(path)
        q.put_many(range(3))
        q.close()
        with ackqueue.AckQueue(path) as again:
            again.put(3)
            assert again.qsize() == 4
    found = stored_counts(path)
    assert found["default"] == (4, 4)
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        assert db.open().root()[ROOT_KEY]["default"].length() == 4
    finally:
        db.close()


def test_a_close_folds_its_own_count_and_a_dropped_queues_count_waits_for_the_files_close(
    tmp_path, monkeypatch
):
    """Closing a queue folds its own count only: the others of the file stay deferred (a fold
    of theirs would have them write their Length at every commit). A queue dropped without
    ``close()`` is folded when the file's last queue closes, as a closed one is."""
    monkeypatch.setattr(counts, "FOLD_EVERY", 1000)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, name="other") as other:
        other.put("o")
        q = ackqueue.AckQueue(path)
        q.put_many(range(3))
        q.close()
        assert other._book.record.counted_in_log
        dropped = ackqueue.AckQueue(path, name="dropped")
        dropped.put_many(range(2))
        del dropped
        gc.collect()
        other.put("p")
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        queues = db.open().root()[ROOT_KEY]
        for name, count in [("default", 3), ("other", 2), ("dropped", 2)]:
            assert not queues[name].counted_in_log, name
            assert queues[name].length() == count, name
    finally:
        db.close()


@pytest.mark.parametrize("fold_due", [False, True])
def test_a_close_whose_fold_is_applied_again_still_folds_the_count(
    tmp_path, monkeypatch, fold_due: bool
):
    """A change may be applied twice (a conflict at its commit, or another change of its group
    failing partway: storage/commit.py). The close's fold took the queue off the deferred list
    while it was applied, so a second application found nothing to fold: the close left the
    count to the log, and the queue reopened on the same open file lost the changes folded
    before (kept in memory only). With ``fold_due``, the commit also folds every deferred
    count (one was due): the closing queue's, folded by the close, must not be added twice."""
    monkeypatch.setattr(counts, "FOLD_EVERY", 1000)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, name="other"):  # keeps the file's store open throughout
        q = ackqueue.AckQueue(path)
        q.put_many(range(3))
        q.put(3)
        log_counts = q._book.store.counts
        real_stop = log_counts.stop
        conflicts: list[bool] = []

        def stop_then_conflict(record: object) -> None:
            if fold_due:
                log_counts._since_fold = counts.FOLD_EVERY
            real_stop(record)
            if not conflicts:  # the first application's commit meets a conflict
                conflicts.append(True)
                raise ConflictError("a conflict after the fold's edit")

        monkeypatch.setattr(log_counts, "stop", stop_then_conflict)
        q.close()
        monkeypatch.undo()
        assert conflicts
        with ackqueue.AckQueue(path) as again:
            assert again.qsize() == 4
            again.put(4)
            assert again.qsize() == 5
            again._book.store.counts.fold_all(again._book.store.run)
    assert stored_counts(path)["default"] == (5, 5)
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        record = db.open().root()[ROOT_KEY]["default"]
        assert not record.counted_in_log and record.length() == 5
    finally:
        db.close()


def test_queues_that_do_not_defer_their_count_keep_it_exact(tmp_path):
    """A memory queue, and a crash image opened through the caller's own database (counts
    kept in the Length by every commit, the logged changes settled first)."""
    with ackqueue.AckQueue(None) as q, q.connect() as c:
        q.put_many(range(4))
        c.ack(c.get())
        assert q.qsize() == 3
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        c = q.connect()
        q.put_many(range(7))
        c.ack(c.get())
        image = crash_image(path, str(tmp_path / "image.fs"))
    db = ZODB.DB(QueueFileStorage(image))
    try:
        with ackqueue.AckQueue(db=db) as q:
            assert q.qsize() == 6
            record = q._book.record
            assert not record.counted_in_log and record.length() == 6
            q.put("more")
            assert record.length() == 7
    finally:
        db.close()
    assert stored_counts(image)["default"] == (7, 7)


def test_a_pack_folds_every_count_and_keeps_the_commits_after_the_fold(tmp_path, monkeypatch):
    """The pack time is just before the fold: commits made between the fold and the pack (an
    autopack runs beside puts and acks) keep the changes a reader adds to the Length."""
    monkeypatch.setattr(counts, "FOLD_EVERY", 1000)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        c = q.connect()
        q.put_many(range(10))
        store = q._store
        pack_time = store._pack_time()  # folds, as Store.pack does first
        assert stored_counts(crash_image(path, str(tmp_path / "f.fs")))["default"] == (10, 10)
        db = ZODB.DB(QueueFileStorage(str(tmp_path / "f.fs"), read_only=True))
        try:
            assert db.open().root()[ROOT_KEY]["default"].length() == 10  # folded
        finally:
            db.close()
        for _ in range(4):
            c.ack(c.get())  # each ack rewrites the same bucket: superseded but for the last
        store.db.pack(pack_time)
        assert stored_counts(crash_image(path, str(tmp_path / "p.fs")))["default"] == (6, 6)
        assert q.qsize() == 6


def test_counts_stay_exact_when_the_wall_clock_stands_still(tmp_path, monkeypatch):
    """A wall clock stepped back (or standing still) makes each new transaction id the last
    one plus one: the transaction right after a fold is then the fold's id + 1, and a reader
    must still add its change."""
    monkeypatch.setattr(counts, "FOLD_EVERY", 3)
    frozen = time.time()
    monkeypatch.setattr(BaseStorage.time, "time", lambda: frozen)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        for i in range(7):
            q.put(i)
            found = stored_counts(crash_image(path, str(tmp_path / f"i{i}.fs")))
            assert found["default"] == (i + 1, i + 1)


def test_an_open_and_close_that_change_nothing_leave_the_file_as_it_was(tmp_path):
    """A count is deferred from a queue's first change, not from its open: a process that
    opens a queue, finds nothing to do and closes (a cron consumer, a look at ``qsize``)
    writes nothing, where it used to append three commits, each fsynced."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put(1)
    with ackqueue.AckQueue(path, name="other") as q:
        q.put(2)
        c = q.connect()
        c.ack(c.get())
    with open(path, "rb") as f:
        before = f.read()
    for _ in range(3):
        with ackqueue.AckQueue(path) as q:
            assert q.qsize() == 1
            with ackqueue.AckQueue(path, name="other") as other:
                assert other.qsize() == 0
    with open(path, "rb") as f:
        assert f.read() == before


@pytest.mark.parametrize("first", ["put", "ack"])
def test_a_queue_killed_after_its_first_change_counts_every_change(tmp_path, first):
    """The commit of a session's first change starts its deferral (the record says so, and
    its Length is written with that change in it): a kill -9 after it, and after more
    changes, leaves a count an opener reads right."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        for i in range(5):
            q.put(i)
    with ackqueue.AckQueue(path) as q:
        c = q.connect()
        if first == "put":
            q.put(5)
        else:
            c.ack(c.get())
        assert q._book.record.counted_in_log
        right_after = crash_image(path, str(tmp_path / "first.fs"))
        q.put(6)
        c.ack(c.get())
        later = crash_image(path, str(tmp_path / "later.fs"))
        expected = q.qsize()
    with ackqueue.AckQueue(right_after) as q:
        assert q.qsize() == (6 if first == "put" else 4)
    with ackqueue.AckQueue(later) as q:
        assert q.qsize() == expected
