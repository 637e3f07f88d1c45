"""A file shared by processes (``shared=True``) stays bounded with no user action, as one
process's does: its private server packs it when due (issue 21, item 11)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import ackqueue

CYCLES = 3000  # put + get + ack each; some 1.4 KB of file apiece if nothing packed


@pytest.fixture(autouse=True)
def quick_idle_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")


@pytest.mark.campaign
def test_a_churning_shared_queue_stays_small_without_anyone_packing(tmp_path: Path) -> None:
    path = str(tmp_path / "q.fs")
    started = time.monotonic()
    largest = 0
    with ackqueue.AckQueue(path, shared=True) as q, q.connect() as c:
        for i in range(100):
            q.put(i)
        for i in range(CYCLES):
            q.put(i)
            c.ack(c.get())
            if i % 100 == 0:
                largest = max(largest, os.path.getsize(path))
    written = CYCLES * 1400
    print(f"{CYCLES} cycles in {time.monotonic() - started:.1f} s; the file peaked at "
          f"{largest} bytes, ends at {os.path.getsize(path)}")
    # Unpacked, the file holds everything written (~4.2 MB); the server's packs keep it near
    # its floor (a pack is due past 1 MB of garbage): the same per-cycle bound at any length.
    assert largest < written / 2
    assert os.path.getsize(path) < written / 2
    with ackqueue.AckQueue(path, shared=True) as q:  # nothing lost to the packs
        assert sorted(q.get(timeout=30) for _ in range(100)) == list(range(CYCLES - 100, CYCLES))
