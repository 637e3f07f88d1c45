"""q.pause() and q.resume(): nothing is handed out while paused, in any process; stored."""

from __future__ import annotations

import threading

import pytest
import ZEO
from polling import wait_for_waiter, wait_until
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue


def test_a_paused_queue_hands_nothing_out_but_takes_puts(qpath):
    with ackqueue.AckQueue(qpath) as q, q.connect() as c:
        q.put("before")
        q.pause()
        assert q.paused
        q.put("during")  # puts go on
        assert q.qsize() == 2  # and are counted
        with pytest.raises(ackqueue.Empty):
            q.get(timeout=0.05)
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        with pytest.raises(ackqueue.Empty):
            c.get_many(5, timeout=0.05)
        q.resume()
        assert not q.paused
        assert c.get_many(5, timeout=1) == ["before", "during"]


def test_resume_wakes_a_get_blocked_on_a_paused_queue(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.pause()
        q.put("job")
        got: list[object] = []
        t = threading.Thread(target=lambda: got.append(q.get(timeout=30)))
        t.start()
        wait_for_waiter(q.not_empty)
        q.resume()
        t.join(10)
        assert got == ["job"]


def test_a_pause_is_stored_and_holds_after_a_reopen(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("job")
        q.pause()
    with ackqueue.AckQueue(qpath) as q:
        assert q.paused
        with pytest.raises(ackqueue.Empty):
            q.get_nowait()
        q.resume()
    with ackqueue.AckQueue(qpath) as q:
        assert not q.paused and q.get_nowait() == "job"


def test_a_pause_in_one_process_stops_deliveries_in_another(zeo_server: ZEOServer):  # noqa: F811
    db = ZEO.DB(zeo_server.addr)  # another client: as if another process
    try:
        with ackqueue.AckQueue(zeo_server.uri) as here, ackqueue.AckQueue(db=db) as there:
            here.put("job")
            here.pause()
            wait_until(lambda: there.paused, timeout=10, what="the pause seen by the other")
            with pytest.raises(ackqueue.Empty):
                there.get(timeout=0.2)
            here.resume()
            wait_until(lambda: not there.paused, timeout=10, what="the resume seen")
            assert there.get(timeout=10) == "job"
    finally:
        db.close()


def test_a_paused_queue_says_so_in_its_metrics_and_once_in_the_log_when_opened(qpath, caplog):
    with ackqueue.AckQueue(qpath) as q:
        q.put("job")
        assert not q.metrics().paused
        q.pause()
        assert q.metrics().paused and q.metrics().as_dict()["paused"]
    with caplog.at_level("WARNING", logger="ackqueue"):
        with ackqueue.AckQueue(qpath) as q:
            assert q.metrics().paused
            q.resume()
            assert not q.metrics().paused
        with ackqueue.AckQueue(qpath):
            pass  # resumed: nothing more to say
    said = [r.getMessage() for r in caplog.records if "paused" in r.getMessage()]
    assert len(said) == 1
    assert "'default' opened paused" in said[0] and "ackqueue resume" in said[0]
