"""Fencing over ZEO: a consumer process stopped past its session lease cannot ack an item that
was meanwhile given to another consumer; its ack raises and changes nothing."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from conftest import child_argv, child_env
from polling import wait_until
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


# A consumer in a loop (get, ack, get...) has its next item taken in its ack's commit (a
# ride, queue/riding.py); it stops itself right after that ack returned, so the ride waits.
RIDER = """
import signal, sys, threading, ackqueue
import ackqueue.shared.riding as riding
riding.RIDE_SECONDS = 10  # a loaded machine must not miss the ride this test is about
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
c = q.connect()
c.ack(c.get(timeout=30))
c.ack(c.get(timeout=30))  # within the ride window of the first ack: this one takes a ride
print("acked", flush=True)
signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # this thread stops the process
try:
    item = c.get(timeout=float(sys.argv[3]))
    print("got", item, flush=True)
except ackqueue.Empty:
    print("empty", flush=True)
q.close()
"""


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def run_a_stopped_getter(uri: str, child_code: str, items: list[str], acked_elsewhere: str,
                         reads_first: str | None = None) -> None:
    """Put ``items``; start ``child_code``, which stops itself (SIGSTOP) past the lease in the
    middle of its consuming; once its session is reaped, get ``acked_elsewhere`` here and ack
    it; then SIGCONT the child, whose next get must come back empty, not with that item."""
    with ackqueue.AckQueue(uri, session_timeout=LEASE) as q:
        q.put_many(items)
        child = subprocess.Popen(
            child_argv(child_code, uri, str(LEASE), "3"),
            env=child_env(), stdout=subprocess.PIPE, text=True,
        )
        try:
            assert child.stdout is not None
            if reads_first is not None:
                assert child.stdout.readline().strip() == reads_first
            wait_until(lambda: stopped(child.pid), 60, "the consumer to stop itself")
            with q.connect() as c:
                item = c.get(timeout=30)  # once the stopped process's session was reaped
                assert item == acked_elsewhere
                c.ack(item)
            child.send_signal(signal.SIGCONT)
            assert child.stdout.readline().strip() == "empty"
            assert child.wait(timeout=30) == 0
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
                child.wait()


@pytest.mark.parametrize("round_", range(3))
def test_an_item_ridden_before_a_stop_past_the_lease_is_not_handed_out_after_its_ack(
    zeo_server: ZEOServer, round_: int  # noqa: F811
) -> None:
    """The ride's holds were reaped while the process was stopped; another process got the
    item and acked it. On SIGCONT the stopped consumer's next get must not return it."""
    run_a_stopped_getter(zeo_server.uri, RIDER, ["one", "two", "three"], "three",
                         reads_first="acked")


# A consumer that stops itself (SIGSTOP, from its own thread) just before or just after the
# first call of a method of ackqueue (a fault injected at a point the campaign's SIGSTOPs hit),
# then gets once more: it prints "got ITEM" or "empty".
STOPS_AT = """
import importlib, signal, sys, threading, ackqueue
import ackqueue.shared.riding as riding
riding.RIDE_SECONDS = 10  # a loaded machine must not miss a ride (the stop is what ends it)
owner = getattr(importlib.import_module("{module}"), "{cls}")
method, calls = getattr(owner, "{method}"), []

def stop():
    calls.append(1)
    if len(calls) == 1:
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

def stopping(*args):
    {before}
    result = method(*args)
    {after}
    return result

setattr(owner, "{method}", stopping)
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
c = q.connect()
{consume}
try:
    item = c.get(timeout=float(sys.argv[3]))
    print("got", item, flush=True)
except ackqueue.Empty:
    print("empty", flush=True)
q.close()
"""


def stops_at(where: str, when: str, consume: str = "") -> str:
    """The code of a child that stops itself ``when`` ("before" or "after") the first call of
    ``where`` ("package.module.Class.method"), having run ``consume`` first."""
    module, cls, method = where.rsplit(".", 2)
    return STOPS_AT.format(module=module, cls=cls, method=method, consume=consume,
                           before="stop()" if when == "before" else "pass",
                           after="stop()" if when == "after" else "pass")


# Stopped after its second ack committed but before that ack's ride landed in the process.
RIDER_STOPPED_LANDING = stops_at("ackqueue.shared.riding.AckRides.landed", "before", (
    "c.ack(c.get(timeout=30))\n"
    "c.ack(c.get(timeout=30))  # within the ride window of the first: this one takes a ride"))


def test_an_item_ridden_by_an_ack_stopped_before_its_ride_landed_is_not_handed_out(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """The stop falls between the ack's commit (which took the ride's holds) and the ride's
    landing in the process: the ride looks fresh on SIGCONT, but its holds were reaped and the
    item acked elsewhere meanwhile (the shared kill campaign's SIGSTOPs found it)."""
    run_a_stopped_getter(zeo_server.uri, RIDER_STOPPED_LANDING, ["one", "two", "three"], "three")


# Stopped inside a get, after the get's hold committed and before the get returned (4 of the 5
# problems of kill_shared.py --kills 30 --stops 25 --seed 6 on 1523169 were such gets, their
# hold reaped and the item acked elsewhere meanwhile).
GETTER_STOPPED_AFTER_ITS_HOLD = stops_at("ackqueue.shared.mode.SharedMode.take", "after")


def test_a_get_stopped_past_the_lease_after_its_hold_committed_does_not_return_the_item(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    run_a_stopped_getter(zeo_server.uri, GETTER_STOPPED_AFTER_ITS_HOLD, ["one"], "one")


# A WorkerPool whose process stops itself in its first handler, with more items prefetched.
POOL = """
import signal, sys, threading, ackqueue
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
pool = None

def handle(item):
    print("ran", item, flush=True)
    if item == "last":
        pool.stop()
    elif item == "i0":  # this thread stops the process, before it goes on
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

pool = ackqueue.WorkerPool(q, handle, threads=1, prefetch=10)
pool.run()
q.close()
print("done", flush=True)
"""


def test_a_pool_stopped_past_the_lease_does_not_run_its_prefetched_items_acked_elsewhere(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    items = [f"i{n}" for n in range(30)]
    with ackqueue.AckQueue(zeo_server.uri, session_timeout=LEASE) as q:
        q.put_many(items)
        child = subprocess.Popen(
            child_argv(POOL, zeo_server.uri, str(LEASE)),
            env=child_env(), stdout=subprocess.PIPE, text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().split() == ["ran", "i0"]
            wait_until(lambda: stopped(child.pid), what="the pool to stop itself")
            with q.connect() as c:
                acked = []
                for _ in items:  # the prefetched ones once the stopped session was reaped
                    item = c.get(timeout=30)
                    c.ack(item)
                    acked.append(item)
            assert sorted(acked) == sorted(items)
            child.send_signal(signal.SIGCONT)
            q.put("last")
            ran = []
            for line in child.stdout:
                if line.strip() == "done":
                    break
                ran.append(line.split()[1])
            assert ran == ["last"]  # none of the items acked here ran again there
            assert child.wait(timeout=30) == 0
        finally:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
                child.wait()


POOL_UNTIL_EMPTY = """
import signal, sys, threading, ackqueue
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))

def handle(item):
    if item == "i0":  # this thread stops the process, before it goes on
        print("stopping", flush=True)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

stats = ackqueue.WorkerPool(q, handle, threads=2, prefetch=4).run_until_empty()
print("done", q.qsize(), q.unacked_count(), flush=True)
q.close()
"""


def test_a_pool_reaped_while_stopped_still_finishes_run_until_empty(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    items = [f"i{n}" for n in range(10)]
    with ackqueue.AckQueue(zeo_server.uri, session_timeout=LEASE) as q:
        q.put_many(items)
        child = subprocess.Popen(
            child_argv(POOL_UNTIL_EMPTY, zeo_server.uri, str(LEASE)),
            env=child_env(), stdout=subprocess.PIPE, text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "stopping"
            wait_until(lambda: stopped(child.pid), what="the pool to stop itself")
            with q.connect() as c:
                while True:  # what is left, the stopped pool's holds once they are reaped
                    try:
                        c.ack(c.get(timeout=5))
                    except ackqueue.Empty:
                        break
            child.send_signal(signal.SIGCONT)
            assert child.wait(timeout=60) == 0
            assert child.stdout.read().split() == ["done", "0", "0"]
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
