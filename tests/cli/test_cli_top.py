"""``ackqueue top``: a live view of a queue another process is using, and of a ZEO storage."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

from conftest import child_env, spawn_child
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue
from ackqueue.cli.top import run_top

HOLD_TWO_THEN_PUT = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1])
q.put_many(range(5))
c = q.connect()
c.get(); c.get()
print('holding', flush=True)
sys.stdin.readline()
q.put_many(range(100))
print('put', flush=True)
sys.stdin.read()
"""


def top_lines(*argv: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", "ackqueue", "top", *argv, "--json"],
        env=child_env(), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_top_shows_a_live_processes_holds_by_owner_and_the_rate_of_its_puts(qpath):
    holder = spawn_child(HOLD_TWO_THEN_PUT, qpath)
    try:
        assert holder.stdout.readline() == "holding\n"
        deadline = time.monotonic() + 15
        while True:  # the holder reports its holds in its status file within a second or so
            (view,) = top_lines(qpath, "--once")
            (queue,) = view["queues"]
            if queue["held"] == 2 or time.monotonic() > deadline:
                break
        assert view["live_pid"] == holder.pid
        assert (queue["ready"], queue["held"], queue["stored"]) == (3, 2, 5)
        assert queue["held_by"]["MainThread"]["held"] == 2
        assert queue["held_by"]["MainThread"]["oldest_age"] >= 0
        assert queue["oldest_ready_age"] >= 0 and queue["rates"] is None
        def puts_between_refreshes(interval: float) -> None:
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "put\n"

        out = io.StringIO()
        assert run_top(qpath, None, True, 2, 1.0, out=out, sleep=puts_between_refreshes) == 0
        first, second = (json.loads(line) for line in out.getvalue().splitlines())
        assert first["queues"][0]["rates"] is None
        rates = second["queues"][0]["rates"]
        elapsed = second["at"] - first["at"]
        assert second["queues"][0]["stored"] == 105
        assert abs(rates["stored"] - 100 / elapsed) < 1e-6 and rates["dead"] == 0
    finally:
        holder.communicate("", timeout=30)


def test_top_text_view_refreshes_n_times_and_names_owners(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put_many(range(1234))
    out = io.StringIO()
    slept: list[float] = []
    assert run_top(qpath, None, False, 3, 0.25, out=out, sleep=slept.append) == 0
    text = out.getvalue()
    assert slept == [0.25, 0.25]
    assert text.count("queue 'default' (fifo)") == 3
    assert "ready          1,234" in text and "+0.0/s" in text
    assert "\x1b[" not in text  # not a terminal: frames one after another, no redraw codes


def test_top_on_a_zeo_storage_shows_sessions_and_stored_holds(
    zeo_server: ZEOServer,  # noqa: F811
):
    with ackqueue.AckQueue(zeo_server.uri, session_timeout=60) as q:
        q.put_many(["a", "b", "c"])
        with q.connect() as c:
            c.get()
            (view,) = top_lines(zeo_server.uri, "--once")
    (queue,) = view["queues"]
    assert (queue["ready"], queue["held"]) == (2, 1)
    (session,) = view["sessions"]
    assert session["held"] == 1 and not session["lapsed"]
    assert list(queue["held_by"]) == [session["id"]]


def test_top_prints_to_the_stdout_of_the_call_not_the_one_at_import(qpath, capsys) -> None:
    # run_top was imported at collection, before capsys replaced sys.stdout: a default bound at
    # import wrote past the capture (seen as an empty `top --once` in a full run).
    with ackqueue.AckQueue(qpath) as q:
        q.put("job")
    assert run_top(qpath, None, as_json=True, refreshes=1, interval=0) == 0
    assert json.loads(capsys.readouterr().out)["queues"]
