"""Crashes: SIGKILL at random moments of a mixed workload, and in the middle of a pack.

The workload and its checker are benchmarks/stress.py (run there with 200+ kills); here a
shorter run of the same thing. Every child journals each operation before it starts and
after it returns, and after every kill the file must open and agree with the journal: each
item whose put returned is stored or was consumed, nothing whose ack returned is stored,
and redeliveries stay within the nacks plus what was held at the kills.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest
import ZODB
from conftest import TESTS_DIR, child_env
from fault_child import load_stress
from polling import wait_until
from ZODB.FileStorage import FileStorage

import ackqueue

CHILD = os.path.join(TESTS_DIR, "fault_child.py")
stress = load_stress()


@pytest.mark.campaign
def test_random_sigkills_of_a_mixed_workload_lose_no_committed_item(tmp_path):
    result = stress.run_stress(str(tmp_path), kills=30, seed=2024, max_delay=0.4, env=child_env())
    assert result["ok"], result["errors"]
    assert result["confirmed_puts"] > 500 and result["confirmed_acks"] > 200, result
    assert result["nacks"] > 0 and result["plain_gets"] > 0, result


@pytest.mark.campaign
def test_random_sigkills_with_packs_in_line_every_few_dozen_commits_lose_nothing(tmp_path):
    # A small file is packed by the put or ack whose commit made the pack due, in that thread:
    # with a 32 KB floor the children pack every few dozen commits, so kills land before,
    # inside and after those packs.
    result = stress.run_stress(
        str(tmp_path), kills=20, seed=77, max_delay=0.4, env=child_env(), pack_floor=32 * 1024
    )
    assert result["ok"], result["errors"]
    assert result["autopacks"] >= 10, result
    assert result["confirmed_puts"] > 300 and result["confirmed_acks"] > 100, result


def prefill(path: str, journal_path: str, n: int) -> None:
    """A file with n items put and most of them taken again, so that a pack has work to do."""
    journal = stress.Journal(journal_path, 0)
    with ackqueue.AckQueue(path) as q:
        for i in range(n):
            ident = f"0.fill.{i}"
            journal.log("p", ident)
            q.put((ident, b"f" * 50))
            journal.log("P", ident)
        for _ in range(n * 2 // 3):
            journal.log("q")
            journal.log("Q", q.get()[0])


def journaled(journal_path: str, run: int, event: str) -> int:
    """How many ``event`` lines run ``run`` has written to the journal so far."""
    prefix = f"{run} {event} ".encode()
    with open(journal_path, "rb") as f:
        return sum(line.startswith(prefix) for line in f)


def wait_for_journal(child: subprocess.Popen[bytes], journal_path: str, run: int, event: str,
                     count: int) -> None:
    def seen() -> bool:
        assert child.poll() is None, f"the child of run {run} ended by itself: {child.returncode}"
        return journaled(journal_path, run, event) >= count

    wait_until(seen, timeout=60, what=f"{count} {event!r} events of run {run}")


def test_sigkill_during_pack_loses_nothing_and_the_file_opens(tmp_path):
    path = str(tmp_path / "q.fs")
    journal_path = str(tmp_path / "journal.txt")
    prefill(path, journal_path, 1500)
    rng = random.Random(7)
    runs = 8
    for run in range(1, runs + 1):
        child = subprocess.Popen(
            [sys.executable, CHILD, "pack", path, journal_path, str(run)],
            stdout=subprocess.PIPE, env=child_env(),
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        # The kill point is counted in the child's own events, not in seconds, so that it
        # lands in a pack as often on a fast disk as on a slow one: once the child journals
        # the start of its n-th pack, after a few more of its puts (n and few at random).
        wait_for_journal(child, journal_path, run, "k", rng.randint(1, 3))
        more_puts = journaled(journal_path, run, "P") + rng.randint(0, 3)
        wait_for_journal(child, journal_path, run, "P", more_puts)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        tally, counts = stress.check(path, journal_path)
        assert tally.errors == [], f"after kill {run}: {tally.errors}"
    assert counts["kills_in_pack"] >= runs // 2, f"too few kills landed in a pack: {counts}"
    assert counts["missing_explained_by_cut_plain_gets"] == 0, counts
    # the file still packs, and keeps everything through it
    stored = sorted(item for item in stress.stored_ids(path))
    with ackqueue.AckQueue(path) as q:
        q.pack()
    assert sorted(stress.stored_ids(path)) == stored


# -- bad environments: each a clear error that says what and where -----------------------


def test_missing_directory_is_named(tmp_path):
    path = str(tmp_path / "nope" / "q.fs")
    with pytest.raises(ackqueue.StorageError, match="directory .*nope does not exist"):
        ackqueue.AckQueue(path)


def test_a_directory_given_as_the_file_is_named(tmp_path):
    with pytest.raises(ackqueue.StorageError, match=f"{tmp_path}.*Is a directory"):
        ackqueue.AckQueue(str(tmp_path))


def test_text_file_is_not_taken_for_a_queue(tmp_path):
    path = tmp_path / "notes.fs"
    path.write_text("not a database\n")
    with pytest.raises(ackqueue.NotAQueueFileError, match=f"{path} is not a ZODB FileStorage"):
        ackqueue.AckQueue(str(path))
    assert path.read_text() == "not a database\n", "the foreign file was changed"


def test_a_filestorage_of_another_application_is_refused_untouched(tmp_path):
    path = str(tmp_path / "app.fs")
    db = ZODB.DB(FileStorage(path))
    with db.transaction() as conn:
        conn.root()["customers"] = {"ann": 1}
    db.close()
    size = os.path.getsize(path)
    with pytest.raises(ackqueue.NotAQueueFileError, match=f"{path} holds a ZODB database"):
        ackqueue.AckQueue(path)
    assert os.path.getsize(path) == size, "ackqueue wrote into another application's file"
    db = ZODB.DB(FileStorage(path))
    with db.transaction() as conn:
        assert dict(conn.root()) == {"customers": {"ann": 1}}
    db.close()


LOCK_HOLDER = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1])
q.put("kept")
print("open", flush=True)
sys.stdin.read()
q.close()
"""


def test_a_file_held_by_a_live_process_names_it_and_opens_once_it_is_gone(tmp_path):
    path = str(tmp_path / "q.fs")
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(),
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == b"open"
    with pytest.raises(ackqueue.QueueLockedError) as locked:
        ackqueue.AckQueue(path)
    assert path in str(locked.value) and f"pid {holder.pid}" in str(locked.value)
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0
    with ackqueue.AckQueue(path) as q:
        assert q.get_nowait() == "kept"


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory bind-mounted read-only (root ignores file modes), or a skip."""
    ro = tmp_path / "ro"
    ro.mkdir()
    with ackqueue.AckQueue(str(ro / "existing.fs")) as q:
        q.put("kept")
    done = subprocess.run(
        f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}",
        shell=True, capture_output=True,
    )
    if done.returncode != 0:
        subprocess.run(["umount", str(ro)], capture_output=True)
        pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.decode().strip()}")
    try:
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_read_only_directory_and_file_give_a_clear_error_and_lose_nothing(read_only_dir):
    for name in ("new.fs", "existing.fs"):
        path = str(read_only_dir / name)
        with pytest.raises(ackqueue.StorageError, match=f"{path}.*Read-only file system"):
            ackqueue.AckQueue(path)
    subprocess.run(["umount", str(read_only_dir)], check=True)  # the cause goes away
    subprocess.run(["mount", "--bind", str(read_only_dir), str(read_only_dir)], check=True)
    with ackqueue.AckQueue(str(read_only_dir / "existing.fs")) as q:
        assert q.get_nowait() == "kept"


def test_a_pack_cut_between_its_two_renames_reopens_with_everything(tmp_path):
    """FileStorage ends a pack with file -> file.old, then file.pack -> file. A SIGKILL
    between the two leaves no file at all; opening must not start an empty queue."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        for i in range(20):
            q.put(i)
        q.get()
    with open(path, "rb") as f:
        packed_looking = f.read()[: os.path.getsize(path) // 2]
    os.rename(path, path + ".old")  # the state between the renames
    with open(path + ".pack", "wb") as f:
        f.write(packed_looking)
    with ackqueue.AckQueue(path) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == list(range(1, 20))
    assert not os.path.exists(path + ".old") and not os.path.exists(path + ".pack")
