"""WorkerPool when settling a failed item fails: the pool neither waits forever nor loses it.

A burial (or nack) that does not commit leaves the item held by the pool's consumer, and a
``run_until_empty()`` that went on would wait for a queue that never drains. A full disk stops
the pool as a failed ack does (``stopped_by == "error"``), and the item goes back to the queue;
a queue closed under the pool ends it with the item kept in the file. (A server that cannot be
reached is tried again: tests/shared/test_zeo_unreachable.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from conftest import TESTS_DIR, child_env

import ackqueue

CHILD = os.path.join(TESTS_DIR, "fault_child.py")


@pytest.mark.parametrize("mode", [
    pytest.param("bury", id="WorkerPool"), pytest.param("abury", id="AsyncWorkerPool")
])
def test_a_burial_that_cannot_commit_stops_the_pool_with_an_error_and_keeps_the_item(
    tmp_path, mode
):
    """The handler fails the only item (``max_attempts=1``) and fills the file-size limit, so
    the burial's commit fails with EFBIG (see tests/fault_child.py, ``bury``)."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put("poison")
    proc = subprocess.run(
        [sys.executable, CHILD, mode, path],
        env=child_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not report["hung"], "run_until_empty() did not return after the burial failed"
    assert report["full"] == {"stopped_by": "error", "exit_code": 1, "dead": 0}, report
    assert "settling item 'poison' failed" in proc.stderr
    assert "File too large" in proc.stderr
    assert report["after_full"] == {"ready": 1, "held": 0, "dead": 0}, "the item is lost"
    # With room again, the next run buries it.
    assert report["again"] == {"stopped_by": None, "exit_code": 0, "dead": 1}, report
    assert report["after_again"] == {"ready": 0, "held": 0, "dead": 1}
    with ackqueue.AckQueue(path) as q:
        assert [d.item for d in q.dead_letters()] == ["poison"] and q.qsize() == 0


def test_a_queue_closed_under_a_burial_ends_the_pool_and_keeps_the_item(qpath):
    q: ackqueue.AckQueue[str] = ackqueue.AckQueue(qpath)
    q.put("poison")

    def close_and_fail(item: str) -> None:
        q.close()
        raise ValueError(f"cannot handle {item!r}")

    pool = ackqueue.WorkerPool(
        q, close_and_fail, threads=2, retry=ackqueue.Retry(max_attempts=1), poll=0.05
    )
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(pool.run_until_empty()))
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "run_until_empty() did not return after the queue closed"
    assert pool.stats.dead == 0 and outcome, outcome
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 1 and q.dead_count() == 0  # back in the queue, not buried
        assert q.get_nowait() == "poison"


def test_a_queue_closed_under_the_pool_says_closed_not_drained(qpath):
    """``stopped_by`` says a run ended because its queue was closed (items left), not that
    it drained: None would tell a caller there was nothing more to do."""
    q: ackqueue.AckQueue[int] = ackqueue.AckQueue(qpath)
    q.put_many(list(range(20)))
    handled: list[int] = []

    def close_on_the_third(item: int) -> None:
        handled.append(item)
        if len(handled) == 3:
            q.close()

    pool = ackqueue.WorkerPool(q, close_on_the_third, threads=1, prefetch=1, poll=0.05)
    outcome: list[ackqueue.PoolStats] = []
    runner = threading.Thread(target=lambda: outcome.append(pool.run_until_empty()))
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "run_until_empty() did not return after the queue closed"
    (stats,) = outcome
    assert (stats.stopped_by, stats.exit_code, stats.interrupted) == ("closed", 0, False)
    with ackqueue.AckQueue(qpath) as q:
        left = [q.get_nowait() for _ in range(q.qsize())]
    assert len(left) >= 17 and sorted(set(left) | set(handled)) == list(range(20)), left
