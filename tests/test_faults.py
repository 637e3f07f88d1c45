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
import time

from conftest import child_env
from fault_child import load_stress

import ackqueue

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_child.py")
stress = load_stress()


def test_random_sigkills_of_a_mixed_workload_lose_no_committed_item(tmp_path):
    result = stress.run_stress(str(tmp_path), kills=30, seed=2024, max_delay=0.4, env=child_env())
    assert result["ok"], result["errors"]
    assert result["confirmed_puts"] > 500 and result["confirmed_acks"] > 200, result
    assert result["nacks"] > 0 and result["plain_gets"] > 0, result


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
        time.sleep(rng.uniform(0.02, 0.3))  # the random moment of the kill, not a sync
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
