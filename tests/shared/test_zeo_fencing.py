"""Fencing over ZEO: a consumer process stopped past its session lease cannot ack an item that
was meanwhile given to another consumer; its ack raises and changes nothing."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from conftest import child_argv, child_env
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue

LEASE = 1.0

CONSUMER = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
c = q.connect()
item = c.get(timeout=30)
print("got", item, flush=True)
sys.stdin.readline()
try:
    c.ack(item)
    print("acked", flush=True)
except ackqueue.LeaseExpiredError:
    print("fenced", flush=True)
q.close()
"""


def test_stopped_consumer_past_its_lease_cannot_ack_the_redelivered_item(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    with ackqueue.AckQueue(zeo_server.uri, session_timeout=LEASE) as q:
        q.put("job")
        child = subprocess.Popen(
            child_argv(CONSUMER, zeo_server.uri, str(LEASE)),
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().split() == ["got", "job"]
            child.send_signal(signal.SIGSTOP)
            with q.connect() as c:
                # Held by the stopped process: delivered here only once its session lapsed.
                item = c.get(timeout=30)
                assert item == "job"
                child.send_signal(signal.SIGCONT)
                child.stdin.write("ack now\n")
                child.stdin.flush()
                assert child.stdout.readline().strip() == "fenced"
                assert child.wait(timeout=30) == 0
                c.ack(item)  # the fenced ack changed nothing: the entry and our hold are intact
            assert q.qsize() == 0
            try:
                extra = q.get(timeout=0.5)
            except ackqueue.Empty:
                extra = None
            assert extra is None
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
                child.wait()


LATE_ACKER = """
import sys, time, ackqueue
q = ackqueue.AckQueue(sys.argv[1], shared=True, session_timeout=float(sys.argv[2]))
c = q.connect()
item = c.get(timeout=30)
print("got", item, flush=True)
when = sys.stdin.readline().strip()
if when == "after-the-loss-is-seen":  # the session thread voided the hold first
    deadline = time.monotonic() + 30
    while q.unacked_count() and time.monotonic() < deadline:
        time.sleep(0.01)
try:
    c.ack(item)
    print("acked", flush=True)
except ackqueue.NotHeldError as exc:
    print(type(exc).__name__, str(exc).replace("\\n", " "), flush=True)
q.close()
"""


@pytest.mark.parametrize("when", ["at-once", "after-the-loss-is-seen"])
def test_a_late_ack_after_a_reap_and_another_ack_says_the_lease_expired(
    tmp_path: Path, when: str
) -> None:
    """Shared mode, a real SIGSTOP past ``session_timeout``: another process gets the item and
    acks it; the stopped process's ack, whether it runs before or after its session thread
    sees the loss, raises LeaseExpiredError naming the session lease (issue 21, item 17)."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, shared=True, session_timeout=LEASE) as q:
        q.put("job")
        child = subprocess.Popen(
            child_argv(LATE_ACKER, path, str(LEASE)),
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().split() == ["got", "job"]
            child.send_signal(signal.SIGSTOP)
            with q.connect() as c:
                item = c.get(timeout=30)  # once the stopped process's session lapsed
                c.ack(item)
            child.stdin.write(when + "\n")  # read at once on SIGCONT
            child.stdin.flush()
            child.send_signal(signal.SIGCONT)
            outcome = child.stdout.readline().strip()
            assert child.wait(timeout=30) == 0
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
                child.wait()
        assert outcome.startswith("LeaseExpiredError "), outcome
        assert "session" in outcome and "None" not in outcome, outcome
        assert q.qsize() == 0 and q.unacked_count() == 0
