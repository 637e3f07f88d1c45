"""Several processes, each with several threads, sharing one queue through a real ZEO server.

A consumer process is SIGKILLed while it holds items: its session lapses, a live process reaps
it, and the items it held are delivered again; nothing else is delivered twice and every
confirmed put is consumed. The same holds when the ZEO server restarts mid-run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest
from conftest import TESTS_DIR, child_env
from polling import bounded
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue

WORKER = os.path.join(TESTS_DIR, "zeo_worker.py")
PROCESSES = 4
THREADS = 4
ITERATIONS = 15
SESSION_TIMEOUT = 2.0
RESTART_SESSION_TIMEOUT = 6.0
DEADLINE = 90.0


def read_log(path: str) -> list[tuple[str, str]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(line.rstrip("\n").split(" ", 1)) for line in f if " " in line]  # type: ignore[misc]


def wait_for(
    what: str,
    condition: Callable[[], bool],
    procs: list[subprocess.Popen[bytes]],
    timeout: float = DEADLINE,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        failed = [p.returncode for p in procs if p.poll() not in (None, 0)]
        assert not failed, f"a worker failed while waiting for {what}: exit codes {failed}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polling with a deadline


def history(items: set[str], logs: list[str]) -> str:
    """What every log says of ``items``, and every error a worker rode out: for a failure."""
    lines = [f"delivered more than once: {sorted(items)}"]
    for path in logs:
        for kind, what in read_log(path):
            if kind == "E" or any(what.startswith(item) for item in items):
                lines.append(f"{os.path.basename(path)}: {kind} {what}")
    return "\n".join(lines)


def start_worker(
    uri: str, log: str, role: str, lease: float, iterations: int = ITERATIONS
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, WORKER, uri, log, role, str(THREADS), str(iterations), str(lease)]
    return subprocess.Popen(argv, env=child_env())


def run_with_a_killed_consumer(server: ZEOServer, tmp_path, restart_server: bool) -> None:
    logs = [os.path.join(tmp_path, f"w{n}.log") for n in range(PROCESSES)]
    victim_log = logs[0]
    # Across a restart a ZEO client reconnects within a second or two of the server's return;
    # the lease must outlast that, or live processes are rightly taken for dead.
    lease = RESTART_SESSION_TIMEOUT if restart_server else SESSION_TIMEOUT
    roles = ["victim"] + ["normal"] * (PROCESSES - 1)
    pairs = zip(logs, roles, strict=True)
    # Across a restart the workers must still have work when the server is back: with the
    # shared path this fast, 15 iterations a thread could all be done before it is.
    iterations = ITERATIONS * 4 if restart_server else ITERATIONS
    procs = [start_worker(server.uri, log, role, lease, iterations) for log, role in pairs]
    try:
        def events(kind: str, paths: list[str] = logs) -> list[str]:
            return [what for path in paths for k, what in read_log(path) if k == kind]

        if restart_server:
            def all_putting() -> bool:
                return all(len(events("P", [log])) >= THREADS for log in logs)

            wait_for("every worker to put", all_putting, procs)
            server.restart()
            puts_before_restart = len(events("P"))
        def victim_holds() -> bool:
            return len(events("W", [victim_log])) == THREADS

        wait_for("the victim to hold items", victim_holds, procs)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        for proc in procs[1:]:
            assert proc.wait(timeout=DEADLINE) == 0
        held_by_victim = set(events("H", [victim_log]))
        assert held_by_victim, "the victim held nothing when killed: the test proves nothing"

        # Drain what is left: the victim's items come back once its session is reaped.
        confirmed = set(events("P"))
        delivered = Counter(events("D") + events("H"))
        def all_back() -> bool:
            return confirmed <= set(delivered) and all(delivered[i] > 1 for i in held_by_victim)

        with ackqueue.AckQueue(server.uri, session_timeout=lease) as q:
            with q.connect() as c:
                for _ in bounded(10 * len(confirmed) + 1000, "draining what is left"):
                    try:  # once all is back, only a put that raised yet was stored may remain
                        item = c.get(timeout=0.5 if all_back() else DEADLINE)
                    except ackqueue.Empty:
                        break
                    delivered[item] += 1
                    c.ack(item)
            assert q.qsize() == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    lost = confirmed - set(delivered)
    assert not lost, f"confirmed puts never consumed: {lost}"
    twice = {item for item, n in delivered.items() if n > 1}
    assert twice == held_by_victim, history(twice - held_by_victim, logs)
    assert all(delivered[item] == 2 for item in twice)
    assert not events("L"), "a live process lost its session"
    if restart_server:
        assert len(events("P")) > puts_before_restart, "no work went on after the restart"
    if not restart_server:
        assert not events("E"), events("E")


def test_killed_consumer_process_items_are_taken_over_and_nothing_else_repeats(
    zeo_server: ZEOServer, tmp_path  # noqa: F811
) -> None:
    run_with_a_killed_consumer(zeo_server, tmp_path, restart_server=False)


@pytest.mark.campaign
def test_server_restart_mid_run_loses_nothing_committed(
    zeo_server: ZEOServer, tmp_path  # noqa: F811
) -> None:
    run_with_a_killed_consumer(zeo_server, tmp_path, restart_server=True)
