"""Automatic packing keeps a churning queue file small; packs never lose or repeat items;
index checkpoints make reopening after kill -9 read only the tail."""

import logging
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest
import zc.lockfile
from conftest import child_argv, child_env
from polling import bounded, wait_until
from ZODB.FileStorage import FileStorage
from ZODB.fsIndex import fsIndex
from ZODB.serialize import referencesf

import ackqueue
from ackqueue.storage.filestorage import PACK_STATE_KEY

CHURN = 4000  # puts and acks of the churn tests


def files_total(directory):
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def test_churning_queue_stays_small_without_anyone_packing(tmp_path):
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        q._store.packer.min_bytes = 256 * 1024  # the default is larger; this is quicker
        for i in range(100):
            q.put(i)
        c = q.connect()
        largest = 0
        for i in range(CHURN):  # ~1.8 MB written in all (inline entries: format 3)
            q.put(i)
            c.ack(c.get())
            if i % 200 == 0:
                largest = max(largest, files_total(tmp_path))
        assert q._store.packer.packs >= 1
        assert q.qsize() == 100
    # Unpacked, the file would hold all ~1.8 MB written; packing keeps it near the floor.
    # (A relaxed producer never waits for the disk: it would starve a packer that did not
    # get the GIL back when it falls behind.)
    assert largest <= 1_200_000
    assert files_total(tmp_path) <= 1_200_000
    assert not any(n.endswith(".old") for n in os.listdir(tmp_path))


def test_without_autopack_the_same_churn_grows_the_file(tmp_path):
    # The measurement above means something only if the same churn grows the file past its
    # bound without packing.
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed", autopack=False) as q:
        c = q.connect()
        for i in range(CHURN):
            q.put(i)
            c.ack(c.get())
        assert q._store.packer is None
    assert os.path.getsize(path) > 1_500_000


def test_explicit_pack_shrinks_the_file_and_keeps_no_old_copy(tmp_path):
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed", autopack=False) as q:
        for i in range(500):
            q.put(i)
        for _ in range(490):
            q.get()
        before = os.path.getsize(path)
        q.pack()
        assert os.path.getsize(path) < before / 5
        assert not os.path.exists(path + ".old")
        assert [q.get() for _ in range(10)] == list(range(490, 500))


@pytest.mark.parametrize("where", ["inline", "background"])
def test_packs_while_threads_put_and_ack_lose_and_repeat_nothing(tmp_path, where):
    path = os.path.join(tmp_path, "q.fs")
    n = 1500
    got: list[int] = []
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        packer = q._store.packer
        packer.min_bytes = 64 * 1024  # pack often
        if where == "background":
            packer.inline_bytes = 0  # in the packer's thread, not the committers'

        def produce():
            for i in range(n):
                q.put(i)

        def consume():
            c = q.connect()
            deadline = time.monotonic() + 120
            while len(got) < n:
                assert time.monotonic() < deadline, f"only {len(got)} of {n} items acked"
                try:
                    x = c.get(timeout=0.05)
                except ackqueue.Empty:
                    continue
                c.ack(x)
                got.append(x)

        threads = [threading.Thread(target=produce)]
        threads += [threading.Thread(target=consume) for _ in range(2)]
        for t in threads:
            t.start()
        for _ in range(3):
            q.pack()  # explicit packs on top of the automatic ones
        for t in threads:
            t.join(timeout=120)
        assert packer.packs >= 3
    assert sorted(got) == list(range(n))


def autopack_threads():
    return [t for t in threading.enumerate() if t.name == "ackqueue-autopack"]


def test_a_small_file_is_packed_by_the_commit_that_made_it_due_before_it_returns(tmp_path):
    # A background pack of a small file costs 3-4 times its own CPU in GIL hand-offs with the
    # committing threads: a small file is packed in line, by the put or ack whose commit made
    # the pack due, and a larger one still in the background.
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        packer = q._store.packer
        packer.min_bytes = 64 * 1024
        c = q.connect()
        seen_inline = 0
        for i in bounded(20_000, "a pack in line"):
            before = packer.packs
            q.put(i)
            c.ack(c.get())
            assert not autopack_threads()
            seen_inline += packer.packs - before
            if seen_inline >= 2:
                break
        assert os.path.getsize(path) < 4 * 64 * 1024
        # Past inline_bytes, the same churn packs in the packer's thread.
        packer.inline_bytes = 0
        started = packer.packs
        for i in bounded(20_000, "a pack in the background"):
            q.put(i)
            c.ack(c.get())
            if packer._thread is not None:
                break
        wait_until(lambda: packer.packs > started, 30, "the background pack's end")
        assert q.qsize() == 0


def test_an_automatic_pack_that_fails_in_line_leaves_the_put_that_set_it_off_done(
    tmp_path, caplog
):
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        packer = q._store.packer
        packer.min_bytes = 64 * 1024

        def refuse():
            raise OSError(28, "No space left on device")

        packer._pack_time = refuse  # the first step of every pack
        c = q.connect()
        for i in range(1500):
            q.put(i)
            c.ack(c.get())
        assert packer.packs == 0
        assert f"automatic pack of {path} failed" in caplog.text
        q.put("last")
    with ackqueue.AckQueue(path) as q:
        assert q.get_nowait() == "last"


def test_close_waits_for_a_pack_in_line_in_another_thread(tmp_path):
    path = os.path.join(tmp_path, "q.fs")
    q = ackqueue.AckQueue(path, durability="relaxed")
    packer = q._store.packer
    packer.min_bytes = 64 * 1024
    folding, release = threading.Event(), threading.Event()
    fold = packer._pack_time

    def slow_fold():
        folding.set()
        assert release.wait(30)
        return fold()

    packer._pack_time = slow_fold

    puts = []

    def churn():  # puts alone rewrite the tail bucket: garbage
        while not folding.is_set():
            q.put(len(puts))
            puts.append(1)

    churner = threading.Thread(target=churn)
    churner.start()
    assert folding.wait(60)
    closer = threading.Thread(target=q.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive(), "close() returned while a pack was running"
    release.set()
    churner.join(30)
    closer.join(30)
    assert not closer.is_alive()
    assert packer.packs == 1
    with ackqueue.AckQueue(path) as q2:
        assert q2.qsize() == len(puts)


def test_garbage_estimate_is_carried_to_the_next_session(qpath):
    with ackqueue.AckQueue(qpath, durability="relaxed") as q:
        c = q.connect()
        for i in range(300):
            q.put(i)
            c.ack(c.get())
        garbage = q._store.packer.garbage()
        assert garbage > 0
    with ackqueue.AckQueue(qpath) as q:
        packed, recorded, _size = q._store.root()[PACK_STATE_KEY]
        assert recorded >= garbage
        # (plus half the bytes of the commit that recorded it, written after it was measured)
        assert recorded <= q._store.packer.garbage() <= recorded + 1000


CHILD_WRITES_THEN_DIES = """
import os, signal, sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], durability="relaxed")
q._store.packer.index_every = 128 * 1024
for i in range(2000):
    q.put(i)
print(os.path.getsize(sys.argv[1]), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_index_is_saved_as_the_file_grows_so_reopen_after_kill_reads_only_the_tail(qpath):
    out = subprocess.run(
        child_argv(CHILD_WRITES_THEN_DIES, qpath), env=child_env(), capture_output=True, text=True
    )
    assert out.returncode == -signal.SIGKILL
    size = int(out.stdout)
    assert size > 500_000
    # The last index save was at most index_every (128 KB) and a commit before the kill.
    saved = fsIndex.load(qpath + ".index")
    assert size - 128 * 1024 - 4096 < saved["pos"] <= size
    # FileStorage starts from the saved index when it is sane, and scans only past its end.
    storage = FileStorage(qpath, read_only=True)
    try:
        assert storage._used_index == 1
    finally:
        storage.close()
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 2000


def test_a_pack_killed_between_its_renames_is_completed_at_the_next_open(qpath):
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        for i in range(20):
            q.put(i)
    # What FileStorage.pack leaves when killed between renaming the data file to .old and
    # renaming the finished .pack file to the data file.
    with open(qpath, "rb") as src, open(qpath + ".pack", "wb") as dst:
        dst.write(src.read())
    os.rename(qpath, qpath + ".old")
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 20
        assert [q.get_nowait() for _ in range(20)] == list(range(20))
    assert not any(os.path.exists(qpath + end) for end in (".old", ".pack"))


def test_the_restore_of_a_pack_killed_between_its_renames_is_logged_and_leaves_nothing(
    qpath, caplog
):
    """No ``.pack`` copy and no index beside the ``.old`` file: what a user who deleted
    them, or a pack killed before its copy was written, leaves."""
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        q.put_many(range(5))
    os.remove(qpath + ".index")
    os.rename(qpath, qpath + ".old")
    with caplog.at_level(logging.WARNING, logger="ackqueue"), ackqueue.AckQueue(qpath) as q:
        assert [q.get_nowait() for _ in range(5)] == list(range(5))
    assert (
        f"{qpath} was missing after an interrupted pack; restoring it from {qpath}.old"
        in caplog.messages
    )
    assert not any(os.path.exists(qpath + end) for end in (".old", ".pack"))


def test_a_pack_between_its_renames_in_a_live_process_is_left_to_it(qpath):
    """The file missing and ``.old`` beside it is also what a live process's pack looks like
    for a moment: an open then must not move ``.old`` back under that pack's feet (its next
    rename puts the packed copy in place), and says the file is in use."""
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        q.put_many(range(5))
    os.rename(qpath, qpath + ".old")
    lock = zc.lockfile.LockFile(qpath + ".lock")  # the packing process's
    try:
        with pytest.raises(ackqueue.QueueLockedError):
            ackqueue.AckQueue(qpath)
        assert os.path.exists(qpath + ".old") and not os.path.exists(qpath)
    finally:
        lock.close()


def test_an_old_copy_beside_a_whole_file_is_left_alone(qpath):
    """FileStorage's own pack keeps the file as it was before as ``.old`` (``pack_keep_old``,
    its default: ZODB's tools, a program packing the file itself). With the file there, that
    copy is history, never the file: items put after it stay."""
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        q.put_many(range(5))
    storage = FileStorage(qpath)
    try:
        storage.pack(time.time(), referencesf)
    finally:
        storage.close()
    assert os.path.exists(qpath + ".old")
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        q.put_many(range(5, 10))
    with ackqueue.AckQueue(qpath) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == list(range(10))
    assert os.path.exists(qpath + ".old")


def test_backlog_read_after_a_pack_that_dropped_the_readers_snapshot(qpath):
    # The reader's snapshot predates the acks; a pack then drops the tree nodes it saw. The
    # next gets must move to a newer snapshot rather than fail.
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        for i in range(200):
            q.put(i)
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        c = q.connect()
        got = []
        for _ in range(5):
            for _ in range(20):
                x = c.get()
                c.ack(x)
                got.append(x)
            q.pack()
            q._book._reader.connection.cacheMinimize()  # as if evicted: the next reads must load
            q._supply.items = type(q._supply.items)()  # and nothing read ahead
        assert got == list(range(100))


def test_churn_of_larger_items_is_packed_too(tmp_path):
    # Each acked item leaves its own record behind as garbage, and nothing is stored over it;
    # with items larger than the tree nodes they churn, missing those records made the
    # estimate stay under half the file, so no pack ever started and the file grew for good.
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        q._store.packer.min_bytes = 256 * 1024
        payload = "x" * 600
        for i in range(100):
            q.put({"n": i, "payload": payload})
        c = q.connect()
        for i in range(3000):  # ~3.5 MB written in all
            q.put({"n": i, "payload": payload})
            c.ack(c.get())
        assert q._store.packer.packs >= 1
    assert files_total(tmp_path) <= 1_500_000


def test_a_burn_down_is_packed_near_its_end_not_halfway(tmp_path):
    # A pack copies what is live: halfway through burning a backlog down that is half of it,
    # soon garbage anyway. The packer waits while the live data shrinks, packs once most of
    # the backlog is gone, and the file stays within 1.75 times its peak meanwhile.
    path = os.path.join(tmp_path, "q.fs")
    n = 12_000
    with ackqueue.AckQueue(path, durability="relaxed") as q:
        packer = q._store.packer
        packer.min_bytes = 256 * 1024
        for start in range(0, n, 1000):
            q.put_many([{"n": i, "payload": "x" * 100} for i in range(start, start + 1000)])
        filled = os.path.getsize(path)
        assert packer.packs == 0  # a file that only grew holds no garbage
        c = q.connect()
        left_at_first_pack = None
        largest = filled
        for _ in bounded(100_000, "acking everything"):
            if not q.qsize():
                break
            c.ack_many(c.get_many(50))
            largest = max(largest, os.path.getsize(path))
            if left_at_first_pack is None and (packer.packs or packer._thread is not None):
                left_at_first_pack = q.qsize()
        assert left_at_first_pack is not None, "the burn-down was never packed"
        assert left_at_first_pack < 0.4 * n  # the old rule packed with about half left
        assert largest <= 1.75 * filled + packer.min_bytes
        packer.pack()  # what the last acks left: the file ends near empty
    assert os.path.getsize(path) < filled / 10


def test_a_pack_whose_copy_cannot_be_synced_releases_the_commit_lock_and_the_queue_goes_on(
    tmp_path, monkeypatch, caplog
):
    """The packed copy vanishes (its directory was taken away, say) after FileStorage's
    packer wrote it and took the commit lock, and before ackqueue fsyncs it: the pack fails
    with a clear error, and puts, acks and close go on instead of waiting for ever."""

    from ackqueue.storage import filestorage as durability

    real_fsync_path = durability.fsync_path

    def vanishing(path: str) -> None:
        if path.endswith(".pack"):
            os.remove(path)  # the real call below then fails as the operating system says
        real_fsync_path(path)

    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many(range(50))
        with q.connect() as c:
            for _ in range(25):
                c.ack(c.get())
        # A pack keeps the transactions of its last 10 ms whole (counts.fold_for_pack): on a
        # fast machine the 25 acks fall inside them, nothing is packed, no copy is written,
        # and the failure this test is about never comes. Let them age past that window.
        acked_at = time.time()
        wait_until(lambda: time.time() > acked_at + 0.05, what="the acks to age")
        monkeypatch.setattr(durability, "fsync_path", vanishing)
        with pytest.raises(ackqueue.StorageError, match="pack"):
            q.pack()
        said = [r.getMessage() for r in caplog.records
                if r.name == "ackqueue" and r.levelno >= logging.ERROR]
        assert len(said) == 1 and said[0].startswith(
            f"packing {path} failed: its packed copy could not be synced ([Errno 2] "
        ) and said[0].endswith("); the file is unchanged"), said
        monkeypatch.setattr(durability, "fsync_path", real_fsync_path)
        done = threading.Event()

        def put_and_ack() -> None:
            q.put("after")
            with q.connect() as c:
                c.ack(c.get())
            done.set()

        worker = threading.Thread(target=put_and_ack, daemon=True)
        worker.start()
        assert done.wait(30), "a put after the failed pack never returned (commit lock held)"
        q.pack()  # and packing works again
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == 25


def test_a_session_killed_before_recording_its_estimate_has_half_its_writes_counted(tmp_path):
    """The garbage estimate is recorded at index saves and at close: of what a session killed
    before that wrote, the next one takes half for garbage (module docstring), so processes
    that each write a little and die still get their file packed."""
    work, image = str(tmp_path / "work.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(work, autopack=False) as q, q.connect() as c:
        for i in range(1500):
            q.put((i, "x" * 1000))
            c.ack(c.get())
        shutil.copyfile(work, image)  # what a kill -9 leaves: no estimate was ever recorded
    size = os.path.getsize(image)
    assert size > 2 * 1024 * 1024  # twice the least garbage a pack waits for
    with ackqueue.AckQueue(image) as q, q.connect() as c:
        # The open's own commits replace what they rewrite (it makes the deletions the
        # killed session logged in its trees: counts.py): at most what they wrote.
        written = os.path.getsize(image) - size
        assert size // 2 <= q._store.packer.garbage() <= size // 2 + written + 4096
        for i in range(20):
            q.put(i)
            c.ack(c.get())
        assert q._store.packer.packs == 1
    assert os.path.getsize(image) < size // 4


def test_an_index_that_points_a_record_at_anothers_is_a_damaged_file(qpath):
    """The ``.index`` file is trusted at open (FileStorage checks only its last transaction):
    one whose positions of two tree buckets were swapped (a changed byte, an index written
    for another file) must be reported as damage when a bucket is read, not read as the other
    bucket (without FileStorage's check of the record's oid: "entry 16 ... is not stored")."""
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        q.put_many(range(200))
    storage = FileStorage(qpath, read_only=True)
    try:
        buckets = [
            oid for oid in storage._index
            if b"LOBucket" in storage.load(oid)[0][:60]  # the record's class, first
        ]
    finally:
        storage.close()
    saved = fsIndex.load(qpath + ".index")
    index = saved["index"]
    one, other = buckets[1], buckets[2]
    index[one], index[other] = index[other], index[one]
    index.save(saved["pos"], qpath + ".index")
    damaged = pytest.raises(ackqueue.DamagedFileError, match=f"{qpath} is damaged: record")
    with damaged, ackqueue.AckQueue(qpath) as q:
        [q.get_nowait() for _ in range(q.qsize())]


KILLED_AFTER_THE_RENAMES = """
import os, sys
import ackqueue
from ackqueue.storage.filestorage import QueueFileStorage
path = sys.argv[1]
q = ackqueue.AckQueue(path, autopack=False)
with q.connect() as c:
    for _ in range(100):
        c.ack(c.get())
# FileStorage saves the packed file's index right after its renames: die there.
QueueFileStorage._save_index = lambda self: os._exit(9)
q.pack()
"""


def test_a_pack_killed_after_its_renames_leaves_no_index_of_the_file_it_replaced(tmp_path):
    """Killed between FileStorage's renames and its save of the packed file's index: the index
    beside the packed file described the file it replaced, and FileStorage's check of it read
    a transaction header at a position that, in the packed file, holds any bytes (the fault
    tests' kill during a pack met it once in CI: the next open refused the file). The index
    goes before the renames, and the next open scans the file."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many(range(300))
    assert os.path.exists(path + ".index")  # saved at close
    child = subprocess.run(child_argv(KILLED_AFTER_THE_RENAMES, path), env=child_env(),
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 9, child.stderr
    assert not os.path.exists(path + ".old")  # it died after the renames
    assert not os.path.exists(path + ".index")
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == 200
        assert [q.get() for _ in range(200)] == list(range(100, 300))
