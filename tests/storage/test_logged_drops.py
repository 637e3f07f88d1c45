"""Deletions of entries recorded in the commits' metadata (the entry log, storage/counts.py):
an ack stores no object, the fold makes the deletions in the tree, and every reader (the
writer, the store's readers, another process, an opener after a crash) leaves them out.

A copy of the queue file taken while the writer runs is what ``kill -9`` would leave (every
commit is flushed to the OS before put or ack returns): opening the copy is opening after a
crash. The kill campaigns (tests/queue/test_crash.py and others) check the same with real
SIGKILLs."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import tempfile

import pytest
import ZODB
from conftest import REPO_ROOT, TESTS_DIR, child_env, stored_counts
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from side_effects import append_commit
from ZODB.FileStorage.format import TRANS_HDR_LEN

import ackqueue
from ackqueue.records import LOGGED_DROPS_FORMAT, ROOT_KEY
from ackqueue.storage import counts
from ackqueue.storage.filestorage import QueueFileStorage


def crash_image(path: str, into: str) -> str:
    """The file as a kill -9 would leave it now (no index: the opener scans the file)."""
    shutil.copyfile(path, into)
    return into


def last_transaction(path: str) -> tuple[int, dict]:
    """(records stored, metadata) of the last transaction of the file ``path``."""
    storage = QueueFileStorage(path, read_only=True)
    try:
        for txn in storage.iterator():
            last = len(list(txn)), txn.extension
        return last
    finally:
        storage.close()


def tree_size(path: str, name: str = "default") -> int:
    """How many entries the tree of queue ``name`` holds, deletions not yet made included."""
    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    try:
        return len(db.open().root()[ROOT_KEY][name].entries)
    finally:
        db.close()


def stored_items(q: ackqueue.AckQueue) -> list:
    """The items the queue's store holds, read through its reader (as a backlog read is)."""
    return sorted(
        pickle.loads(entry.data)
        for _, entry in q._book.read(lambda record: list(record.entry_items()))
    )


def test_an_ack_stores_no_object_and_records_its_key_in_the_commits_metadata(tmp_path):
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(40))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        c.ack(c.get())  # the first also raises the record's format: it writes the record
        assert q._book.record.format_version == LOGGED_DROPS_FORMAT
        c.ack(c.get())
        records, metadata = last_transaction(crash_image(path, str(tmp_path / "image.fs")))
        assert records == 0
        [checksum, key] = metadata[counts.DROPS_KEY]["default"]
        assert checksum == counts.drops_checksum([key])
        assert metadata[counts.COUNTS_KEY] == {"default": -1}
        # The session's first change folds (it anchors the count): the second is logged only.
        assert tree_size(str(tmp_path / "image.fs")) == 39
        assert stored_counts(str(tmp_path / "image.fs"))["default"] == (38, 38)
        assert stored_items(q) == list(range(2, 40))
    assert tree_size(path) == 38  # a close folds: the tree holds what is left


def test_a_fold_makes_the_logged_deletions_in_the_tree(tmp_path, monkeypatch):
    monkeypatch.setattr(counts, "FOLD_EVERY", 5)
    path, image = str(tmp_path / "q.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(30))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        for n in range(12):
            c.ack(c.get())
            crash_image(path, image)
            size = tree_size(image)
            assert 30 - (n + 1) <= size <= 30 - (n + 1) + 4  # at most a fold's worth more
            assert stored_counts(image)["default"] == (30 - (n + 1),) * 2
        assert stored_items(q) == list(range(12, 30))


def test_an_opener_after_a_crash_makes_the_logged_deletions(tmp_path):
    path, image = str(tmp_path / "q.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(20))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        for _ in range(7):
            c.ack(c.get())
        held = c.get()
        crash_image(path, image)
        assert tree_size(image) == 19  # the session's first change folds; not the others
    with ackqueue.AckQueue(image) as q, q.connect() as c:
        assert q.qsize() == 13
        assert [c.get() for _ in range(13)] == [held, *range(8, 20)]
    assert tree_size(image) == 13


def test_deletions_whose_metadata_is_damaged_make_a_damaged_file(tmp_path):
    """A checksum guards each commit's list of keys: a changed byte there must neither delete
    another item (lost) nor let these come back (delivered again after their ack returned):
    the opener says the file is damaged, and salvage puts back what can be read."""
    image = two_acked(tmp_path)
    sound = str(tmp_path / "sound.fs")
    shutil.copyfile(image, sound)
    for target, listed in (
        (sound, [counts.drops_checksum([2]), 2]),  # as the writer records it
        (image, [counts.drops_checksum([2]), 3]),  # key 2 recorded, 3 read back
    ):
        append_commit(target, {
            counts.DROPS_KEY: {"default": listed},
            counts.COUNTS_KEY: {"default": -1},
            counts.TOTALS_KEY: {"default": 7},
        })
    with ackqueue.AckQueue(sound) as q, q.connect() as c:
        assert q.qsize() == 7
        assert [c.get() for _ in range(7)] == list(range(3, 10))
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(image)
    message = str(raised.value)
    assert image in message and "(damaged) held deletions of queue 'default'" in message
    assert "ackqueue salvage" in message


def two_acked(tmp_path) -> str:
    """A crash image of a queue of 10 items whose session acked 2 (the second through the
    log: the record is of format 6)."""
    path, image = str(tmp_path / "q.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(10))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        c.ack(c.get())
        c.ack(c.get())
        crash_image(path, image)
    return image


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = child_env(PYTHONPATH=os.pathsep.join([REPO_ROOT, TESTS_DIR]))
    return subprocess.run([sys.executable, "-m", "ackqueue", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_command_line_leaves_out_what_the_running_writer_acked(tmp_path):
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many([f"item {n}" for n in range(6)])
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        c.ack(c.get())
        c.ack(c.get())
        assert tree_size(path) == 5  # the writer runs: the second not deleted from the tree yet
        peeked = run_cli("peek", path, "--json")
        assert peeked.returncode == 0, peeked.stderr
        assert [p["item"] for p in json.loads(peeked.stdout)] == [
            f"item {n}" for n in range(2, 6)
        ]
        stats = run_cli("stats", path, "--json")
        assert json.loads(stats.stdout)["queues"][0]["stored"] == 4


def test_a_pack_after_a_burn_down_keeps_none_of_the_deleted_entries(tmp_path):
    """The pack time falls between two folds: the tree as the first fold left it is what is
    kept, not the nodes that still held the entries it deleted."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many([{"n": n, "payload": "x" * 200} for n in range(2000)])
    with ackqueue.AckQueue(path, autopack=False) as q, q.connect() as c:
        for _ in range(1999):
            c.ack(c.get())
        q.pack()
        assert os.path.getsize(path) < 20_000
        assert q.qsize() == 1
    with ackqueue.AckQueue(path) as q:
        assert q.get_nowait() == {"n": 1999, "payload": "x" * 200}


class QueueAcrossCrashes(RuleBasedStateMachine):
    """A queue against a model of its items, ready and held, through gets, acks, nacks,
    plain gets, removals, folds, packs and kill -9 (a crash image reopened): after each step
    the store's reader, another process's view and an opener of a crash image all see the
    model's items, and a get never hands out an item that was acked."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "q0.fs")
        self.images = 0
        self.fold_every, counts.FOLD_EVERY = counts.FOLD_EVERY, 7
        self.q = ackqueue.AckQueue(self.path, autopack=False)
        self.c = self.q.connect()
        self.n = 0
        self.ready: set[int] = set()
        self.held: list[int] = []

    def teardown(self) -> None:
        counts.FOLD_EVERY = self.fold_every
        self.q.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(many=st.integers(1, 4))
    def put(self, many) -> None:
        items = list(range(self.n, self.n + many))
        self.n += many
        if many == 1:
            self.q.put(items[0])
        else:
            self.q.put_many(items)
        self.ready.update(items)

    @precondition(lambda self: self.ready)
    @rule()
    def get(self) -> None:
        item = self.c.get_nowait()
        assert item in self.ready, (item, self.ready)
        self.ready.discard(item)
        self.held.append(item)

    @precondition(lambda self: self.ready)
    @rule()
    def plain_get(self) -> None:
        item = self.q.get_nowait()  # deleted at once in one process
        assert item in self.ready
        self.ready.discard(item)

    @precondition(lambda self: self.held)
    @rule(data=st.data(), settle=st.sampled_from(["ack", "nack", "ack_many"]))
    def settle_held(self, data, settle) -> None:
        if settle == "ack_many":
            chosen, self.held = self.held, []
            self.c.ack_many(chosen)
            return
        item = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        if settle == "ack":
            self.c.ack(item)
        else:
            self.c.nack(item)
            self.ready.add(item)

    @precondition(lambda self: self.ready)
    @rule(data=st.data())
    def remove_where(self, data) -> None:
        gone = data.draw(st.sampled_from(sorted(self.ready)))
        assert self.q.remove_where(lambda item: item == gone) == 1
        self.ready.discard(gone)

    @rule()
    def pack(self) -> None:
        self.q.pack()

    @rule()
    def crash_and_reopen(self) -> None:
        self.images += 1
        image = crash_image(self.path, os.path.join(self.dir, f"q{self.images}.fs"))
        self.q.close()
        self.path = image
        self.q = ackqueue.AckQueue(self.path, autopack=False)
        self.c = self.q.connect()
        self.ready.update(self.held)  # what was held is ready again
        self.held = []

    @invariant()
    def everyone_sees_the_models_items(self) -> None:
        live = sorted(self.ready | set(self.held))
        assert self.q.qsize() == len(self.ready)
        assert stored_items(self.q) == live
        image = crash_image(self.path, os.path.join(self.dir, "look.fs"))
        assert stored_counts(image)["default"] == (len(live), len(live))


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_the_queue_across_crashes_keeps_its_model() -> None:
    machine = QueueAcrossCrashes.TestCase
    machine.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
    machine().runTest()


def test_a_batch_of_deletions_waiting_folds_its_queue_before_the_commits_count_does(
    tmp_path, monkeypatch
):
    """A fold's commit deletes what waits: its size is bounded by deletions, not commits
    (acks of thousands at a time would otherwise wait for 512 commits)."""
    monkeypatch.setattr(counts, "FOLD_DROPS", 10)
    path, image = str(tmp_path / "q.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(100))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        for left in range(97, 0, -3):
            c.ack_many(c.get_many(3))
            crash_image(path, image)
            assert left <= tree_size(image) < left + 10
            assert stored_counts(image)["default"] == (left, left)


@pytest.mark.parametrize("named_by", ["key", "delay"])
def test_an_entry_another_index_names_is_deleted_from_the_tree_at_once(tmp_path, named_by):
    """A reader going from the key index or the delay index to an entry must find it as long
    as that index names it: the two change in the same commit, never one in the log only."""
    path, image = str(tmp_path / "q.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5))
        if named_by == "key":
            q.put("keyed", key="k")
        else:
            q.put("delayed", delay=0.01)
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        for _ in range(5):
            c.ack(c.get())  # through the log (the session's first folds)
        named = c.get(timeout=5)
        assert named in ("keyed", "delayed")
        c.ack(named)
        records, metadata = last_transaction(crash_image(path, image))
        assert records > 0 and counts.DROPS_KEY not in metadata
        assert stored_counts(image)["default"] == (0, 0)


def test_a_reader_at_a_view_before_a_fold_still_leaves_its_deletions_out(tmp_path, monkeypatch):
    """The store's readers move to the latest commit before each read, but a read may run
    while folds go on: a deletion made in the tree is left out of reads for KEEP_FOLDS more
    folds, so a view from before the fold still does not show it."""
    monkeypatch.setattr(counts, "FOLD_EVERY", 3)
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(20))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        c.ack(c.get())  # the session's first change: folded
        c.ack(c.get())
        c.ack(c.get())  # logged
        conn, tm = q._store.open_reader()
        try:
            tm.begin()
            record = conn.root()[ROOT_KEY]["default"]
            assert list(record.entry_keys())[:2] == [3, 4]  # 1 and 2 are in this view's tree
            for _ in range(2 * counts.FOLD_EVERY):  # two folds: 1 and 2 deleted in the first
                q.put("more")
            assert list(record.entry_keys())[:2] == [3, 4]
        finally:
            tm.abort()
            conn.close()


@pytest.mark.parametrize("damaged", ["queue name", "metadata key"])
def test_metadata_whose_names_are_damaged_makes_a_damaged_file(tmp_path, damaged):
    """The metadata pickle keeps a queue's name once and refers to it after, so one changed
    byte moves a commit's count, total and deletions to another name together; one in the key
    hides its deletions. Neither may let the acked items come back quietly."""
    image = two_acked(tmp_path)
    name = "delault" if damaged == "queue name" else "default"
    key = counts.DROPS_KEY if damaged == "queue name" else "ackqueZe.drops"
    append_commit(image, {
        key: {name: [counts.drops_checksum([2]), 2]},
        counts.COUNTS_KEY: {name: -1},
        counts.TOTALS_KEY: {name: 7},
    })
    with pytest.raises(ackqueue.DamagedFileError, match="held deletions of queue 'default'"):
        ackqueue.AckQueue(image)


def test_the_command_line_reads_the_log_of_a_file_that_ends_in_a_commit_cut_short(tmp_path):
    """Read-only, the file is not cut back: FileStorage cannot seek to a transaction in a
    file that ends in a torn one (a writer at work, or killed), so the log is read from the
    first commit on; the acked items stay out of sight."""
    path, image = str(tmp_path / "q.fs"), str(tmp_path / "image.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many([f"item {n}" for n in range(6)])
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        for _ in range(3):
            c.ack(c.get())
        crash_image(path, image)
    # A commit cut short: the start of one, its header written with status "c" (in progress),
    # as a kill -9 in the middle of its write leaves it.
    storage = QueueFileStorage(image, read_only=True)
    try:
        *_, last = storage.iterator()
        start = last._tpos
    finally:
        storage.close()
    with open(image, "r+b") as f:
        f.seek(start)
        header = bytearray(f.read(TRANS_HDR_LEN + 20))
        header[7] = (header[7] + 1) % 256  # a later transaction id
        header[16:17] = b"c"
        f.seek(0, os.SEEK_END)
        f.write(bytes(header))
    peeked = run_cli("peek", image, "--json")
    assert peeked.returncode == 0, peeked.stderr
    assert [p["item"] for p in json.loads(peeked.stdout)] == [f"item {n}" for n in range(3, 6)]


def test_an_acks_commit_of_metadata_only_counts_as_garbage_for_the_packer(tmp_path):
    """Once folded, a commit that stores no record is what a pack drops: the estimate the
    automatic packer goes by counts its bytes (without them a queue that only acks is
    packed late)."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(300))
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        c.ack(c.get())  # the session's first change: folded
        packer = q._store.packer
        size, garbage = os.path.getsize(path), packer.garbage()
        for _ in range(100):
            c.ack(c.get())
        assert packer.garbage() - garbage >= os.path.getsize(path) - size


def test_a_shared_opener_names_the_file_whose_log_is_damaged(short_qpath, monkeypatch):
    """In shared mode the opener reads the log through the private server: the error names
    the queue file, not the server's socket."""
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")
    image = two_acked(pathlib.Path(os.path.dirname(short_qpath)))
    append_commit(image, {
        counts.DROPS_KEY: {"default": [counts.drops_checksum([2]), 3]},
        counts.COUNTS_KEY: {"default": -1},
        counts.TOTALS_KEY: {"default": 7},
    })
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(image, shared=True)
    assert f"queue file {image} is damaged" in str(raised.value)
