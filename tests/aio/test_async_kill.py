"""SIGKILL a process whose async consumers are getting and acking: nothing is lost.

The kill points are chosen by logged events (after the k-th logged get), not by time. After
each kill the queue is reopened: every item whose ack was logged as returned is gone, every
item never acked (held at the kill included) is back, and an item whose ack had begun may be
either. The last state is drained by a sync consumer.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from aiohelp import stored
from conftest import TESTS_DIR, child_env, seed_for
from polling import wait_until

import ackqueue

CHILD = os.path.join(TESTS_DIR, "aio", "async_kill_child.py")
ITEMS = 400


def read_log(log: str) -> list[tuple[str, int]]:
    with open(log) as f:
        return [(w, int(n)) for w, n in (line.split() for line in f if line.endswith("\n"))]


def kill_after_gets(path: str, log: str, gets: int, shared: bool) -> None:
    args = [sys.executable, CHILD, path, log] + (["shared"] if shared else [])
    child = subprocess.Popen(args, env=child_env(), stderr=subprocess.PIPE)
    seen_before = sum(1 for w, _ in read_log(log) if w == "got") if os.path.exists(log) else 0
    deadline = time.monotonic() + 60
    try:
        while True:
            got = sum(1 for w, _ in read_log(log) if w == "got") if os.path.exists(log) else 0
            if got - seen_before >= gets:
                break
            if child.poll() is not None:
                pytest.fail(f"the child ended by itself: {child.stderr.read().decode()}")
            assert time.monotonic() < deadline, "the child logged too few gets"
            time.sleep(0.001)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()


@pytest.mark.campaign
@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "shared"])
def test_sigkill_of_async_consumers_loses_nothing(tmp_path, shared):
    rng = random.Random(seed_for(13))
    path, log = str(tmp_path / "q.fs"), str(tmp_path / "log")
    options = {"shared": True} if shared else {}
    with ackqueue.AckQueue(path, **options) as q:
        q.put_many(range(ITEMS))
    for _ in range(4):
        kill_after_gets(path, log, rng.randrange(1, 60), shared)
        events = read_log(log)
        acked = {n for w, n in events if w == "acked"}
        acking = {n for w, n in events if w == "acking"}
        if shared:
            # The killed process's holds come back once its session lease (1 s) runs out.
            floor = ITEMS - len(acking)
            with ackqueue.AckQueue(path, shared=True) as q:
                wait_until(
                    lambda q=q, floor=floor: q.qsize() >= floor, 30, "the dead session's holds"
                )
        left = stored(path, shared)
        assert len(left) == len(set(left)), "an item came back twice"
        assert not acked & set(left), "an item whose ack returned came back"
        missing = set(range(ITEMS)) - set(left) - acked
        assert missing <= acking - acked, f"lost: {sorted(missing - acking)}"
        assert set(left) | acking >= set(range(ITEMS)) - acked
