"""A queue dropped without close() releases its file once it is garbage-collected.

Code written for ``queue.Queue`` never closes anything. Once such a queue is collected, the
file must be free for this process and for others, with what it held ready again, as on close.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import weakref

import pytest
import ZODB
from conftest import child_argv, child_env
from polling import wait_until

import ackqueue
from ackqueue.shared.holdmarks import holder

COUNT_IN_CHILD = """
import sys, ackqueue, ZODB
if sys.argv[2] == "shared":  # shared mode on the file itself, through a database of our own
    db = ZODB.DB(sys.argv[1])
    q = ackqueue.AckQueue(db=db, shared=True, session_timeout=60)
else:
    q = ackqueue.AckQueue(sys.argv[1])
print(q.qsize(), q.delayed_count())
q.close()
"""


def collected(ref: weakref.ref[ackqueue.AckQueue]) -> None:
    """Wait until the queue, which nothing references any more, is collected."""
    # A timer thread may hold the queue for an instant after its last deadline moved.
    wait_until(lambda: gc.collect() is not None and ref() is None, what="the queue collected")


def counts_in_another_process(path: str, mode: str = "local") -> tuple[int, int]:
    out = subprocess.run(
        child_argv(COUNT_IN_CHILD, path, mode),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    ready, delayed = out.stdout.split()
    return int(ready), int(delayed)


def fill(q: ackqueue.AckQueue, hold: bool) -> None:
    q.put("first")
    q.put("second")
    q.put("later", delay=3600)
    if hold:
        c = q.connect()
        assert c.get() == "first"  # held, never acked; c is dropped with the queue


def wait_for_background_threads(path: str) -> None:
    """Wait until the status thread has written (so it, and in shared mode the session's
    watcher, has had the queue in hand): neither may keep it alive afterwards."""
    wait_until(lambda: os.path.exists(path + ".status"), what="the status file")


@pytest.mark.parametrize("ack_timeout", [None, 3600.0])
def test_a_dropped_queue_frees_its_file_for_another_process_with_holds_back(qpath, ack_timeout):
    q = ackqueue.AckQueue(qpath, ack_timeout=ack_timeout)
    fill(q, hold=True)
    if ack_timeout is None:
        wait_for_background_threads(qpath)
    ref = weakref.ref(q)
    del q
    collected(ref)
    assert counts_in_another_process(qpath) == (2, 1)


def test_a_dropped_queue_can_be_opened_again_in_the_same_process(qpath):
    q = ackqueue.AckQueue(qpath)
    fill(q, hold=True)
    ref = weakref.ref(q)
    del q
    collected(ref)
    with ackqueue.AckQueue(qpath) as again:
        assert (again.qsize(), again.delayed_count()) == (2, 1)
        assert again.get() == "first"


def test_dropping_one_queue_keeps_the_file_open_for_the_others(qpath):
    keep = ackqueue.AckQueue(qpath, name="kept")
    dropped = ackqueue.AckQueue(qpath, name="dropped")
    fill(dropped, hold=True)
    store = keep._store
    ref = weakref.ref(dropped)
    del dropped
    collected(ref)
    assert store._refs == 1 and "dropped" not in store._names
    keep.put("still works")
    assert keep.get() == "still works"
    with ackqueue.AckQueue(qpath, name="dropped") as again:
        assert again.qsize() == 2
    keep.close()
    assert counts_in_another_process(qpath) == (0, 0)  # the file is free after the last close



def test_a_dropped_queue_removes_its_status_file(qpath):
    q = ackqueue.AckQueue(qpath)
    fill(q, hold=True)
    wait_for_background_threads(qpath)
    ref = weakref.ref(q)
    del q
    collected(ref)
    # As on close: the file beside the storage named holds of a queue that is gone.
    wait_until(lambda: not os.path.exists(qpath + ".status"), what="the status file removed")


def test_dropping_a_queue_raises_nothing_into_the_collector(qpath, monkeypatch):
    """The clean-up runs inside the garbage collector (or a thread of its own): an error
    there would only be printed, with the file or the status left open."""
    raised: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    monkeypatch.setattr(threading, "excepthook", raised.append)
    q = ackqueue.AckQueue(qpath)
    q.put("job")
    c = q.connect()
    assert c.get() == "job"
    ref = weakref.ref(q)
    del q, c
    collected(ref)
    wait_until(
        lambda: not any(t.name == "ackqueue-dropped" for t in threading.enumerate()),
        what="the dropped queue's clean-up",
    )
    assert raised == []
    with ackqueue.AckQueue(qpath) as again:
        assert again.get_nowait() == "job"

def test_a_dropped_shared_queue_gives_back_its_stored_holds(qpath):
    # Shared mode on one FileStorage (a database of the test's own), so that the status file
    # tells when the background threads had the queue in hand.
    db = ZODB.DB(qpath)
    q = ackqueue.AckQueue(db=db, shared=True, session_timeout=60)
    fill(q, hold=True)
    wait_for_background_threads(qpath)
    ref = weakref.ref(q)
    del q
    collected(ref)
    # In shared mode the holds are stored: giving them back commits, which a collector
    # (possibly mid-commit itself) hands to a thread of its own.
    wait_until(
        lambda: not any(t.name == "ackqueue-dropped" for t in threading.enumerate()),
        what="the dropped queue's clean-up",
    )
    # Without a give-back the hold would last the whole 60 s session lease: read what is
    # stored before the database closes (a count in another process cannot tell, as its
    # estimate leaves out only its own holds, and a closed database ends the session anyway).
    # The dropped consumer's give-back clears it here, before the queue's own would (which
    # catches what a consumer's could not commit): with either alone it passes.
    conn = db.open()
    try:
        record = conn.root()["ackqueue"]["default"]
        assert [holder(entry) for _, entry in record.entry_items()] == [None, None, None]
    finally:
        conn.close()
    db.close()
    assert counts_in_another_process(qpath, "shared") == (2, 1)
