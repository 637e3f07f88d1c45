"""A full disk during put, ack and pack: a clear error, nothing committed lost, and recovery.

Two ways to fill the disk: a child process with a small RLIMIT_FSIZE (writes past it fail
with EFBIG, SIGXFSZ ignored), which works anywhere; and, where this process may mount, a
real small tmpfs filled up with a ballast file (ENOSPC), freed again by deleting it.
After the error the same queue object must work once the space is back, and the file must
reopen cleanly: no debris from the failed write (FileStorage would log that it truncated
damaged records) and no transaction ids in the future.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest
import ZODB.TimeStamp
from conftest import TESTS_DIR, child_env, stored_items
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileIterator
from ZODB.utils import p64, z64

import ackqueue
from ackqueue.storage.filestorage import open_file_storage

CHILD = os.path.join(TESTS_DIR, "fault_child.py")
PRE = [("pre", i, b"z" * 200) for i in range(50)]


def assert_file_is_clean(path: str, caplog: pytest.LogCaptureFixture) -> None:
    """Reopening logged no repair, and the last transaction id is not in the future."""
    damage = [r.getMessage() for r in caplog.records if r.name.startswith("ZODB")]
    assert damage == [], damage
    last = None
    for txn in FileIterator(path):
        last = txn.tid
    assert last is not None
    assert ZODB.TimeStamp.TimeStamp(last).timeTime() < time.time() + 60


@pytest.mark.parametrize(
    # Room for a few commits of each: with threads, several putters' (a put of a small item
    # rewrites its bucket of up to 16 inline items: ~4 KB here).
    ("op", "limit"), [("put", 4096), ("ack", 4096), ("pack", -2048), ("threads", 65536)]
)
def test_a_file_size_limit_gives_a_clear_error_and_loses_nothing(tmp_path, caplog, op, limit):
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        for item in PRE:
            q.put(item)
    proc = subprocess.run(
        [sys.executable, CHILD, "fsize", path, op, str(limit)],
        env=child_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["error_is_storage_error"], report
    assert "File too large" in report["error"] and path in report["error"], report["error"]
    assert report["put_after"] == "ok", "the queue did not work again once space returned"
    # A put or ack that failed leaves join() waiting for exactly what is not done: a failed
    # put still counted would make join() wait for ever.
    assert report["unfinished"] == report["qsize"] + report["unacked"], report
    if op == "pack":
        assert report["pack_after"] == "ok"

    caplog.set_level(logging.WARNING)
    items = stored_items(path)
    assert_file_is_clean(path, caplog)
    if op == "put":
        assert report["confirmed"], "the limit left no room for a single put"
        full = [("full", i, b"z" * 200) for i in report["confirmed"]]
        assert items == PRE + full + [("after", 0, b"")]
        assert report["qsize"] == len(items)
    elif op == "ack":
        assert report["confirmed"], "the limit left no room for a single ack"
        acked = set(report["confirmed"])
        assert items == [x for x in PRE if x[1] not in acked] + [("after", 0, b"")]
        assert report["unacked"] == len(PRE) - len(acked)
    elif op == "threads":
        assert len(report["confirmed"]) > 4, "the limit left no room for the putters"
        assert items[: len(PRE)] == PRE and items[-1] == ("after", 0, b"")
        middle = items[len(PRE) : -1]
        assert sorted(i for _, i, _ in middle) == sorted(report["confirmed"])
        assert report["qsize"] == len(items)
    else:
        assert items == PRE + [("after", 0, b"")]


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MB tmpfs mounted for the test, or a skip where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        # Lazily: a test that failed may still have the queue's files open on it.
        subprocess.run(["umount", "--lazy", str(mnt)], check=True)


def fill(directory, leave: int) -> str:
    """Fill the filesystem with a ballast file until about ``leave`` bytes are free."""
    ballast = os.path.join(directory, "ballast")
    st = os.statvfs(directory)
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return ballast


def test_a_full_filesystem_gives_a_clear_error_and_recovers_in_process(small_fs, caplog):
    path = str(small_fs / "q.fs")
    q = ackqueue.AckQueue(path)
    for item in PRE:
        q.put(item)
    c = q.connect()
    held = [c.get() for _ in range(10)]
    ballast = fill(small_fs, leave=16 * 1024)
    confirmed = []
    with pytest.raises(ackqueue.StorageError) as failure:
        for i in range(10_000):
            q.put(("full", i, b"z" * 200))
            confirmed.append(("full", i, b"z" * 200))
    assert "No space left on device" in str(failure.value) and path in str(failure.value)
    with pytest.raises(ackqueue.StorageError) as still:
        for item in held:
            c.ack(item)  # there is no room for these either
    assert path in str(still.value) and "since an earlier write failed" in str(still.value)
    assert q.unacked_count() == len(held), "a failed ack must leave the item held"
    os.remove(ballast)  # the space comes back

    c.ack(held[0])
    q.put(("after", 0, b""))
    c.close()
    q.pack()
    assert q.qsize() == len(PRE) - 1 + len(confirmed) + 1
    q.close()
    caplog.set_level(logging.WARNING)
    assert stored_items(path) == PRE[1:] + confirmed + [("after", 0, b"")]
    assert_file_is_clean(path, caplog)


def test_a_queue_closed_as_soon_as_space_returns_leaves_a_clean_file(small_fs, caplog):
    """The put that failed left the unwritten rest of its commit in the file's buffer; with
    no commit after it to cut that off, the close must, or the buffer lands past the last
    commit and the next open cuts it off as a torn commit."""
    path = str(small_fs / "q.fs")
    q = ackqueue.AckQueue(path)
    for item in PRE:
        q.put(item)
    ballast = fill(small_fs, leave=16 * 1024)
    confirmed = []
    with pytest.raises(ackqueue.StorageError):
        for i in range(10_000):
            q.put(("full", i, b"z" * 200))
            confirmed.append(("full", i, b"z" * 200))
    os.remove(ballast)
    q.close()
    caplog.set_level(logging.WARNING)
    assert stored_items(path) == PRE + confirmed
    assert_file_is_clean(path, caplog)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


CLOSE_WHEN_FULL = """
import os, resource, signal, sys, ackqueue
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
q = ackqueue.AckQueue(sys.argv[1])
for i in range(300):
    q.put(i)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
try:
    q.close()
except ackqueue.StorageError as exc:
    print(exc)
"""


def test_closing_on_a_full_disk_says_so_and_loses_nothing(tmp_path):
    path = str(tmp_path / "q.fs")
    proc = subprocess.run(
        [sys.executable, "-c", CLOSE_WHEN_FULL, path],
        env=child_env(), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert path in proc.stdout and "File too large" in proc.stdout, proc.stdout
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == 300


@pytest.mark.parametrize("record_bytes", [3000, 30_000])
def test_a_commit_whose_scratch_file_cannot_be_written_aborts_and_the_next_one_works(
    small_fs, record_bytes
):
    """FileStorage writes a commit's records to its ``.tmp`` scratch file first. On a full
    disk the buffered rest of that write cannot be flushed, and every seek of the file
    flushes first: the abort failed (``No space left on device``), the storage was left
    inside the commit, and a private server kept the client it served counted for ever, so
    it never exited (a shared queue's put of 20 KB items on a full disk, one run in three).
    The abort must succeed and the next commit, once there is room, too."""
    path = str(small_fs / "q.fs")
    storage = open_file_storage(path, durability="strict")
    try:
        ballast = fill(small_fs, leave=2048)
        for n in range(8):  # a few commits, each of which the full disk fails
            txn = TransactionMetaData()
            storage.tpc_begin(txn)
            try:
                storage.store(p64(n + 100), z64, b"x" * record_bytes, "", txn)
                storage.tpc_vote(txn)
            except OSError:
                pass
            else:
                storage.tpc_finish(txn)
                continue
            storage.tpc_abort(txn)  # raised OSError while the scratch could not be flushed
        os.remove(ballast)
        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        storage.store(p64(1), z64, b"after", "", txn)
        storage.tpc_vote(txn)
        storage.tpc_finish(txn)
        assert storage.load(p64(1))[0] == b"after"
    finally:
        storage.close()
