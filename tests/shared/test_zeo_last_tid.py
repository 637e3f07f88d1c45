"""ZEO issue 193: a commit the server made, reported failed by the ZEO client with "new last
tid ... must be greater than previous one". The race (another client's later commit read
together with this commit's answer, its invalidation handled first) leaves the client cache's
last tid ahead of this commit's tid; the test leaves the real client cache of a shared queue
in that state, with a real later commit by another client, then puts (issue 21, item 19)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import transaction
import ZEO
from ZODB.TimeStamp import TimeStamp
from ZODB.utils import u64

import ackqueue
from ackqueue.storage import zeo as sharedserver


@pytest.fixture(autouse=True)
def quick_idle_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")


def tid_at(seconds: float) -> bytes:
    t = time.gmtime(seconds)
    return TimeStamp(*t[:5], t[5] + seconds % 1).raw()


def test_a_put_committed_then_reported_failed_by_zeo_returns_and_is_stored_once(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "q.fs")
    sock = os.path.join(sharedserver.private_dir(path), sharedserver.SOCKET)
    with ackqueue.AckQueue(path, shared=True, session_timeout=5) as q:
        q.put("before")
        cache = q._store.db.storage._cache
        # What the race leaves: the cache already holds a later transaction's tid (a real
        # one, committed by another client below) when this commit's answer is handled.
        ahead = tid_at(time.time() + 0.3)
        assert u64(ahead) > u64(cache.getLastTid())
        other = ZEO.DB(sock)

        def commit_later() -> None:
            deadline = time.monotonic() + 30
            while u64(other.storage.lastTransaction()) <= u64(ahead):
                assert time.monotonic() < deadline, "no commit got past the tid ahead"
                time.sleep(0.05)  # until the clock passes ``ahead``: then a later commit
                conn = other.open()
                conn.root()["ackqueue-test-marker"] = time.time()
                transaction.commit()
                conn.close()

        later = threading.Thread(target=commit_later)
        with cache._lock:
            cache.setLastTid(ahead)
        later.start()
        try:
            q.put("job")  # committed, then ZEO's client raises ValueError in tpc_finish
        finally:
            later.join()
            other.close()
    with ackqueue.AckQueue(path, shared=True) as q:
        items = [q.get(timeout=10) for _ in range(q.qsize())]
    assert items == ["before", "job"]
