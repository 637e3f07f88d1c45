"""Shared mode on RelStorage (its SQLite adapter: a database in a directory, no server), with
real processes: an item put in one process wakes a get blocked in another, and a process
SIGKILLed while holding an item loses it to the others once its session lease lapses.

RelStorage learns of other processes' commits only when it polls, which the session's
watcher does at least every 0.5 s.
"""

from __future__ import annotations

import signal
import time

import pytest
import ZODB
from conftest import spawn_child
from relstorage.adapters.sqlite.adapter import Sqlite3Adapter
from relstorage.options import Options
from relstorage.storage import RelStorage

import ackqueue

LEASE = 2.0

OPEN = """
import ZODB
from relstorage.adapters.sqlite.adapter import Sqlite3Adapter
from relstorage.options import Options
from relstorage.storage import RelStorage

def open_db(path):
    options = Options(keep_history=False)
    return ZODB.DB(RelStorage(Sqlite3Adapter(path, {}, options=options), options=options))
"""

HOLDER = OPEN + """
import sys, ackqueue
q = ackqueue.AckQueue(db=open_db(sys.argv[1]), session_timeout=float(sys.argv[2]))
c = q.connect()
print(c.get(timeout=30), flush=True)
sys.stdin.readline()  # hold it until killed
"""

PUTTER = OPEN + """
import sys, ackqueue
q = ackqueue.AckQueue(db=open_db(sys.argv[1]), session_timeout=float(sys.argv[2]))
sys.stdin.readline()
q.put(sys.argv[3])
q.close()
"""


def open_db(path: str) -> ZODB.DB:
    options = Options(keep_history=False)
    return ZODB.DB(RelStorage(Sqlite3Adapter(path, {}, options=options), options=options))


def test_a_put_in_another_process_wakes_a_blocked_get(tmp_path) -> None:
    path = str(tmp_path / "rs")
    db = open_db(path)
    try:
        with ackqueue.AckQueue(db=db, session_timeout=LEASE) as q:
            assert q.shared
            putter = spawn_child(PUTTER, path, str(LEASE), "from the other process")
            try:
                with q.connect() as c:
                    assert putter.stdin is not None
                    putter.stdin.write("go\n")
                    putter.stdin.flush()
                    started = time.monotonic()
                    item = c.get(timeout=30)
                    waited = time.monotonic() - started
                    assert item == "from the other process"
                    c.ack(item)
                assert putter.wait(timeout=30) == 0
            finally:
                putter.kill()
                putter.wait()
        assert waited < 10
    finally:
        db.close()


def test_a_killed_process_holds_go_to_the_others_once_its_lease_lapses(tmp_path) -> None:
    path = str(tmp_path / "rs")
    db = open_db(path)
    try:
        with ackqueue.AckQueue(db=db, session_timeout=LEASE) as q:
            q.put_many(["held by the victim", "second"])
            victim = spawn_child(HOLDER, path, str(LEASE))
            try:
                assert victim.stdout is not None
                assert victim.stdout.readline().strip() == "held by the victim"
                with q.connect() as c:
                    second = c.get(timeout=10)
                    assert second == "second"  # the first is held, not ready
                    c.ack(second)
                    with pytest.raises(ackqueue.Empty):
                        c.get(timeout=0.5)
                    victim.send_signal(signal.SIGKILL)
                    victim.wait()
                    started = time.monotonic()
                    item = c.get(timeout=30)
                    assert item == "held by the victim"
                    # Reaped after a whole lease of silence, give or take a renewal and a poll.
                    assert time.monotonic() - started < 4 * LEASE
                    c.ack(item)
                assert q.qsize() == 0
            finally:
                victim.kill()
                victim.wait()
    finally:
        db.close()
