"""durability="relaxed": commits reach the OS before put/ack return and the disk within the
sync interval; nothing else in the process loses its fsync."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import child_argv, child_env

import ackqueue
from ackqueue.errors import StorageError
from ackqueue.storage.filestorage import QueueFileStorage, RelaxedFileStorage

CHILD_PUTS_THEN_WAITS = """
import sys, time, ackqueue
q = ackqueue.AckQueue(sys.argv[1], durability=sys.argv[2])
c = q.connect()
for i in range(int(sys.argv[3])):
    q.put(i)
c.ack(c.get())              # item 0 acked
print("ready", flush=True)
time.sleep(60)              # killed long before this ends
"""


@pytest.mark.parametrize("durability", ["relaxed", "strict"])
def test_puts_and_acks_that_returned_survive_kill_9(qpath, durability):
    child = subprocess.Popen(
        child_argv(CHILD_PUTS_THEN_WAITS, qpath, durability, "200"),
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with ackqueue.AckQueue(qpath, durability=durability) as q:
        assert q.qsize() == 199
        assert [q.get() for _ in range(199)] == list(range(1, 200))


def test_relaxed_queue_fsyncs_in_the_background_within_the_interval(qpath):
    with ackqueue.AckQueue(qpath, durability="relaxed") as q:
        storage = q._store.db.storage
        assert isinstance(storage, RelaxedFileStorage)
        storage.sync_interval = 0.01
        q.put("x")
        assert storage.unsynced()
        deadline = time.monotonic() + 5
        while storage.unsynced() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not storage.unsynced()


def test_relaxed_mode_leaves_zodb_fsync_and_other_files_strict(tmp_path):
    fs_module = sys.modules["ZODB.FileStorage.FileStorage"]
    before = fs_module.fsync
    relaxed = ackqueue.AckQueue(os.path.join(tmp_path, "r.fs"), durability="relaxed")
    strict = ackqueue.AckQueue(os.path.join(tmp_path, "s.fs"))
    try:
        assert fs_module.fsync is before is os.fsync
        assert type(strict._store.db.storage) is QueueFileStorage
        assert type(relaxed._store.db.storage) is RelaxedFileStorage
    finally:
        relaxed.close()
        strict.close()


def test_unknown_durability_is_refused_before_anything_is_created(qpath):
    with pytest.raises(ValueError, match="durability"):
        ackqueue.AckQueue(qpath, durability="sometimes")
    assert not os.path.exists(qpath)


def test_one_file_cannot_be_open_with_two_durabilities(qpath):
    with (
        ackqueue.AckQueue(qpath, name="a", durability="relaxed"),
        pytest.raises(StorageError, match="durability"),
    ):
        ackqueue.AckQueue(qpath, name="b")


def test_relaxed_file_reopens_with_everything_after_a_clean_close(qpath):
    with ackqueue.AckQueue(qpath, durability="relaxed") as q:
        for i in range(50):
            q.put(i)
    with ackqueue.AckQueue(qpath) as q:
        assert [q.get() for _ in range(50)] == list(range(50))


def test_strict_put_and_ack_return_only_once_their_commit_is_fsynced(qpath):
    with ackqueue.AckQueue(qpath) as q:
        storage = q._store.db.storage
        c = q.connect()
        for i in range(20):
            q.put(i)
            assert not storage.unsynced()
            c.ack(c.get())
            assert not storage.unsynced()
        assert storage._synced == storage._flushed >= 40


def test_strict_puts_from_many_threads_share_fsyncs_and_each_is_durable(qpath):
    import threading

    with ackqueue.AckQueue(qpath) as q:
        storage = q._store.db.storage
        fsyncs = []
        real_sync = storage.sync_through

        def counting(mark):
            real_sync(mark)
            fsyncs.append((mark, storage._synced))

        storage.sync_through = counting
        q._store._committer._syncer = storage

        def produce(k):
            for i in range(50):
                q.put((k, i))

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert q.qsize() == 300
        assert q._store.commits < 300  # groups formed
        assert not storage.unsynced()
        assert fsyncs and all(synced >= mark for mark, synced in fsyncs)


def test_a_relaxed_queue_never_closed_lets_its_process_exit_with_its_puts(qpath):
    """Code written for ``queue.Queue`` never closes its queue: the background fsync thread of
    a relaxed file must not keep the process from exiting (a non-daemon thread is joined
    before the exit handlers that would stop it run), and the exit still syncs the puts."""
    code = "import sys, ackqueue\nq = ackqueue.AckQueue(sys.argv[1], durability='relaxed')\n"
    code += "q.put('kept')\n"
    child = subprocess.run(child_argv(code, qpath), env=child_env(), timeout=60)
    assert child.returncode == 0
    with ackqueue.AckQueue(qpath) as q:
        assert q.get_nowait() == "kept"
