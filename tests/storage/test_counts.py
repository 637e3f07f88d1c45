"""Queue counts kept in transaction metadata (counts.py) stay exact: after SIGKILL at random
moments (with packs and folds in between), for a read-only reader while the writer runs, and
for an opener that does not defer counts (a caller's own database)."""

from __future__ import annotations

import logging
import random
import signal
import subprocess
import sys

import pytest
import ZODB
from conftest import child_env, stored_counts

import ackqueue
from ackqueue.records import ROOT_KEY
from ackqueue.storage import counts
from ackqueue.storage.filestorage import QueueFileStorage


class LoadCounting(QueueFileStorage):
    """A queue file's storage that counts the records read through it (a Connection reads
    each record with ``loadBefore``)."""

    loads = 0

    def loadBefore(self, oid, tid):  # noqa: N802 - ZODB's name
        self.loads += 1
        return super().loadBefore(oid, tid)

CHURN = """
import random, sys
import ackqueue, ackqueue.storage.counts
ackqueue.storage.counts.FOLD_EVERY = int(sys.argv[3])  # fold often: crashes on every side
rng = random.Random(int(sys.argv[2]))
q = ackqueue.AckQueue(sys.argv[1], durability="relaxed")
other = ackqueue.AckQueue(sys.argv[1], name="other", durability="relaxed")
c = q.connect()
n = 0
while True:
    roll = rng.random()
    if roll < 0.5 or q.qsize() == 0:
        q.put(n)
        n += 1
    elif roll < 0.85:
        c.ack(c.get())
    elif roll < 0.95:
        other.put(n)
    else:
        q.pack()
    print("op", flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_are_exact_after_sigkill_amid_folds_and_packs(tmp_path, seed):
    path = str(tmp_path / "q.fs")
    rng = random.Random(seed)
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHURN, path, str(rng.randrange(10**6)), "7"],
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        for _ in range(rng.randrange(50, 400)):
            if proc.stdout.readline() != "op\n":
                raise AssertionError(proc.communicate(timeout=30)[1][-3000:])
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        found = stored_counts(path)
        # a reader adds the changes the dead writer logged after its last fold
        assert all(entries == count for entries, count in found.values()), found
    assert found["default"][0] > 0, "nothing was left queued: this proves little"
    with ackqueue.AckQueue(path) as q, ackqueue.AckQueue(path, name="other") as other:
        assert q.qsize() == found["default"][0]
        assert other.qsize() == found["other"][0]
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        record = db.open().root()[ROOT_KEY]["default"]
        assert not record.counted_in_log  # closed: the count is back in the Length
        assert record.length() == found["default"][0]
    finally:
        db.close()


def test_a_reader_sees_the_exact_count_while_the_writer_defers_it(tmp_path, monkeypatch):
    monkeypatch.setattr(counts, "FOLD_EVERY", 5)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        c = q.connect()
        for i in range(23):
            q.put(i)
        for _ in range(4):
            c.ack(c.get())
        entries, count = stored_counts(path)["default"]
        assert entries == count == 19
        assert q._book.record.counted_in_log
        # folded every 5 commits: the Length lags by the last few changes only
        assert abs(q._book.record.length() - 19) < 5


def test_a_crashed_files_counts_are_settled_by_an_opener_that_does_not_defer(tmp_path):
    path = str(tmp_path / "q.fs")
    code = (
        "import os, sys, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1])\n"
        "for i in range(30): q.put(i)\n"
        "c = q.connect()\n"
        "for _ in range(7): c.ack(c.get())\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, path], env=child_env(), timeout=60)
    assert proc.returncode == -signal.SIGKILL
    db = ZODB.DB(QueueFileStorage(path))  # the caller's own database: counts kept eagerly
    try:
        with ackqueue.AckQueue(db=db) as q:
            assert q.qsize() == 23
            assert not q._book.record.counted_in_log and q._book.record.length() == 23
            q.put("more")
            assert q._book.record.length() == 24
    finally:
        db.close()


def test_an_opener_after_a_kill_trusts_recorded_counts_that_vouch_for_each_other(tmp_path):
    """Every commit records the count it leaves beside its change: when the chain holds, the
    opener after a kill takes the count from it and reads none of the entries (a recount
    reads every bucket of the tree: a million items after kill -9 took seconds)."""
    path = str(tmp_path / "q.fs")
    code = (
        "import os, sys, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1])\n"
        "for i in range(400): q.put(i)\n"
        "c = q.connect()\n"
        "for _ in range(7): c.ack(c.get())\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, path], env=child_env(), timeout=60)
    assert proc.returncode == -signal.SIGKILL
    storage = LoadCounting(path)
    db = ZODB.DB(storage)
    try:
        with ackqueue.AckQueue(db=db) as q:
            opened = storage.loads
            assert q.qsize() == 393
            assert not q._book.record.counted_in_log and q._book.record.length() == 393
    finally:
        db.close()
    # 400 entries fill at least 25 buckets of at most 16: a recount would have read them all
    assert opened < 400 // 16, f"{opened} records read at open"


@pytest.mark.parametrize("recorded", [30, 5])
def test_a_closed_files_damaged_count_is_put_right_at_open(tmp_path, caplog, recorded):
    """A clean close writes the count to the queue's Length and records it in that commit too:
    a Length that disagrees with it (a changed byte in either) is recounted at open, so that
    neither a short count strands items nor a long one makes gets look for items not there."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(30))
    storage = QueueFileStorage(path, read_only=True)
    try:
        db = ZODB.DB(storage)
        length = db.open().root()[ROOT_KEY]["default"].length
        assert length() == 30
        data, _serial = storage.load(length._p_oid)
        at = storage._lookup_pos(length._p_oid) + 42  # past the data record's header
        db.close()
    finally:
        storage.close()
    value = data.rindex(b"K\x1e")  # the state: BININT1 30
    with open(path, "r+b") as f:
        f.seek(at + value + 1)
        f.write(bytes([5 if recorded == 30 else 45]))  # the Length now says 5 (or 45)
    with caplog.at_level(logging.WARNING, logger="ackqueue"), ackqueue.AckQueue(path) as q:
        assert q.qsize() == 30
        got = [q.get_nowait() for _ in range(30)]
        assert sorted(got) == list(range(30)) and q.qsize() == 0
    assert any("count" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
