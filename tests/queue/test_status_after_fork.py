"""A child made by fork, with queues of its parent open.

The child inherits the parent's queue objects, but not their files (their descriptors share
their offsets with the parent's), sessions or threads. Before, a child that exited normally
closed the parent's stores at its exit (writing the index and a commit into the parent's file
under it: the parent's next commit failed with "int too large to convert"), removed the
parent's status file, and answered requests meant for the parent; in shared mode (ZEO or
PostgreSQL) it ended the parent's session, so the parent's holds were reaped under it; a lock
another thread held at the fork hung the child's first open, and the queue's own lock held
then (a put or get under way in another thread) hung every use of the parent's queue in the
child, its ``close()`` included. Now the parent's queues count as
closed in the child, with an error that says why, and the child's own queues work. Each case
runs in a child Python (a fork inside the test runner would copy its threads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import child_env

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

SCRIPT = r"""
import os, sys, time
import ackqueue
from ackqueue.queue import status
from ackqueue.storage import store

parent_file, child_file, case = sys.argv[1:]
shared = case.startswith("shared")
locks_held = case.endswith("locks held")
q = ackqueue.AckQueue(parent_file, shared=shared)
c = q.connect()
q.put("job")
job = c.get()  # held: the parent's status file names it (shared mode: its session)
deadline = time.monotonic() + 30
beside = not shared and "://" not in parent_file  # a status file: a file of one process
while beside and (status.read_status(parent_file) or {}).get("pid") != os.getpid():
    assert time.monotonic() < deadline, "no status file"
    time.sleep(0.05)

def child():
    errors = []
    for use in (lambda: q.put("from the child"), lambda: c.ack(job), lambda: q.get_nowait()):
        try:
            use()
        except ackqueue.QueueClosedError as exc:
            errors.append(f"process {os.getppid()}, before the fork" in str(exc))
    c.close()  # gives back nothing of the parent's (shared mode: it hung on the parent's server)
    with ackqueue.AckQueue(child_file) as mine, mine.connect() as m:
        mine.put("own")
        assert m.get() == "own"
        time.sleep(1.5)  # the child's status thread writes its files meanwhile
    return 0 if errors == [True, True, True] else 3

if locks_held:  # as if other threads held them at the fork (the queue's: a put under way)
    status.beacon._lock.acquire()
    store._registry_lock.acquire()
    q.mutex.acquire()
pid = os.fork()
if pid == 0:
    sys.exit(child())  # a normal exit: exit handlers, then every object freed
if locks_held:
    status.beacon._lock.release()
    store._registry_lock.release()
    q.mutex.release()
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
body = status.read_status(parent_file)
mine = not beside or body is not None and body["pid"] == os.getpid()
c.ack(job)  # the parent's file, untouched by the child (shared: its session too)
q.put("after")
c.ack(c.get())
q.put("left")
q.close()
with ackqueue.AckQueue(parent_file, shared=shared) as again:
    print(code, mine, again.qsize(), again.get_nowait())
"""


@pytest.mark.parametrize("case", ["plain", "locks held", "shared", "shared, locks held"])
def test_a_forked_child_leaves_the_parents_queues_alone(tmp_path: object, case: str) -> None:
    parent_file, child_file = (os.path.join(str(tmp_path), n) for n in ("p.fs", "c.fs"))
    run(parent_file, child_file, case)


def test_a_forked_child_leaves_the_parents_postgresql_connections_alone(
    tmp_path: object, postgres_uri: str
) -> None:
    run(postgres_uri, os.path.join(str(tmp_path), "c.fs"), "postgresql")


def run(parent_file: str, child_file: str, case: str) -> None:
    try:
        proc = subprocess.run(
            [sys.executable, "-W", "ignore::DeprecationWarning", "-c", SCRIPT,
             parent_file, child_file, case],
            env=child_env(), capture_output=True, text=True, timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: on a lock another thread held at the fork, or on the parent's server")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The child saw the parent's queues closed and used its own (0); the parent's status
    # file is still there, the parent's; its file took its later commits and reopens whole.
    assert proc.stdout.split() == ["0", "True", "1", "left"], proc.stderr[-3000:]


CLIENT_LOCK_SCRIPT = r"""
import fcntl, os, sys
import ackqueue

path = sys.argv[1]
q = ackqueue.AckQueue(path, shared=True)
q.put("job")
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(write)
    os.read(read, 1)  # lives on until the parent has looked
    os._exit(0)
os.close(read)
q.close()  # this process lets go of the server's directory
lock = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".ackqueue",
                    "clients.lock")
fd = os.open(lock, os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no client left pinned to it
    print("free")
except BlockingIOError:
    print("held")
os.write(write, b"x")
os.waitpid(pid, 0)
"""


def test_a_forked_child_does_not_keep_the_parents_hold_on_the_servers_directory(
    tmp_path: object,
) -> None:
    """A client of a private server holds a shared lock on its directory's clients.lock,
    and a child made by fork shared that lock: the parent's close left it held by the child,
    so the stopped server's directory stayed for as long as the child lived."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", CLIENT_LOCK_SCRIPT,
         os.path.join(str(tmp_path), "q.fs")],
        env=child_env(), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["free"]


ASYNC_SCRIPT = r"""
import asyncio, os, sys
import ackqueue

loop = asyncio.new_event_loop()
q = ackqueue.AsyncAckQueue(sys.argv[1])
loop.run_until_complete(q.put("job"))
pid = os.fork()
if pid == 0:
    async def child():
        told = []
        for use in (lambda: q.put("from the child"), q.get):
            try:
                await use()
            except ackqueue.QueueClosedError as exc:
                told.append(f"process {os.getppid()}, before the fork" in str(exc))
        await q.close()
        return told
    os._exit(0 if asyncio.run(child()) == [True, True] else 3)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(code, loop.run_until_complete(q.get()))
loop.run_until_complete(q.close())
"""


def test_a_forked_child_is_told_the_parents_async_queue_is_closed(tmp_path: object) -> None:
    """An AsyncAckQueue runs its calls on threads, which a child made by fork does not have:
    the parent's queue's get and close() in the child waited for ever on a call handed to a
    thread that was not there. The child gets threads of its own, which say the queue is
    closed there."""
    try:
        proc = subprocess.run(
            [sys.executable, "-W", "ignore::DeprecationWarning", "-c", ASYNC_SCRIPT,
             os.path.join(str(tmp_path), "q.fs")],
            env=child_env(), capture_output=True, text=True, timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a call handed to one of the parent's threads, absent in the child")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["0", "job"], proc.stderr[-3000:]
