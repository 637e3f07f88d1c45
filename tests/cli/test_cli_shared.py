"""``ackqueue stats`` on a shared storage: held items per queue and the sessions holding them.

In shared mode holds are stored (under the session that took them), so stats reads them from
the storage itself: from a ZEO server by URI, or from a file a ``shared=True`` queue wrote,
even after that process was killed.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys

from conftest import child_env, spawn_child
from polling import wait_until
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue
from ackqueue.cli import commands as cli
from ackqueue.cli.top import run_top


def stats(capsys, target: str, *extra: str) -> dict:
    assert cli.main(["stats", target, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_stats_over_zeo_counts_held_items_and_lists_live_sessions(
    zeo_server: ZEOServer,  # noqa: F811
    capsys,
):
    with ackqueue.AckQueue(zeo_server.uri, session_timeout=60) as q:
        q.put_many(["a", "b", "c"])
        with ackqueue.AckQueue(zeo_server.uri, name="other", session_timeout=60) as other:
            other.put("x")
            c = q.connect()
            item = c.get()
            assert item == "a"
            sid = q._mode.session.sid
            report = stats(capsys, zeo_server.uri)
            by_name = {s["name"]: s for s in report["queues"]}
            assert (by_name["default"]["held"], by_name["default"]["ready"]) == (1, 2)
            assert (by_name["other"]["held"], by_name["other"]["ready"]) == (0, 1)
            [held] = by_name["default"]["held_items"]
            assert held["owner"] == sid and held["key"]
            [session] = report["sessions"]
            assert (session["id"], session["held"], session["lapsed"]) == (sid, 1, False)
            assert cli.main(["stats", zeo_server.uri]) == 0
            text = capsys.readouterr().out
            assert "held    1" in text and f"{sid} " in text and "live" in text
            c.ack(item)
            after = {s["name"]: s for s in stats(capsys, zeo_server.uri)["queues"]}
            assert (after["default"]["held"], after["default"]["ready"]) == (0, 2)


HOLD_AND_WAIT = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], shared=True, session_timeout=60)
q.put_many(["a", "b", "c"])
c = q.connect()
c.get()
print(q._mode.session.sid, flush=True)
sys.stdin.read()
"""


def test_stats_of_a_shared_file_shows_the_holds_of_a_killed_process(qpath, capsys):
    child = spawn_child(HOLD_AND_WAIT, qpath)
    try:
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        assert sid, "the child did not take its hold"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    report = stats(capsys, qpath)
    [queue] = report["queues"]
    assert (queue["stored"], queue["held"], queue["ready"]) == (3, 1, 2)
    assert [h["owner"] for h in queue["held_items"]] == [sid]
    [session] = report["sessions"]
    assert (session["id"], session["pid"], session["held"]) == (sid, child.pid, 1)


def test_stats_of_a_shared_file_names_its_server_and_a_killed_sessions_process_as_gone(
    qpath, capsys
):
    """The file's lock is held by the private server, not by a user's process; a session whose
    pid on this host runs no more is said to be gone before its 60 s lease lapses."""
    child = spawn_child(HOLD_AND_WAIT, qpath)
    try:
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        assert sid, "the child did not take its hold"
        report = stats(capsys, qpath)
        [session] = report["sessions"]
        assert report["live_pid_is_shared_server"] and report["live_pid"] != child.pid
        assert (session["pid"], session["process_gone"], session["lapsed"]) == (
            child.pid, False, False)
        assert cli.main(["stats", qpath]) == 0
        text = capsys.readouterr().out
        assert f"served by ackqueue's shared server (process {report['live_pid']})" in text
        assert "open in process" not in text and f"pid {child.pid}): live," in text
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    report = stats(capsys, qpath)
    [session] = report["sessions"]
    assert (session["pid"], session["process_gone"], session["lapsed"]) == (
        child.pid, True, False)
    assert cli.main(["stats", qpath]) == 0
    text = capsys.readouterr().out
    assert f"pid {child.pid}): GONE (process {child.pid} is no longer running" in text
    shown = io.StringIO()
    run_top(qpath, None, False, 1, 0.0, out=shown)
    assert "served by ackqueue's shared server" in shown.getvalue()
    assert f"pid {child.pid}): GONE" in shown.getvalue()



def test_changing_commands_work_on_a_file_processes_share(tmp_path):
    """requeue, pause, resume, purge and pack on a file that another process has open with
    shared=True go through its server (opening the file directly is refused while the server
    holds it)."""
    path = str(tmp_path / "jobs.fs")

    def command(*argv: str) -> None:
        done = subprocess.run([sys.executable, "-m", "ackqueue", *argv, path], env=child_env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    with ackqueue.AckQueue(path, shared=True, max_attempts=1) as q:
        q.put_many(range(5))
        with q.connect() as c:
            c.reject(c.get())
            c.reject(c.get())
        assert (q.qsize(), q.dead_count()) == (3, 2)
        command("requeue", "--dead", "--yes")
        command("pause")
        wait_until(lambda: q.paused, 10, "the pause to reach this process")
        command("resume")
        command("pack")
        # Another process's commits reach this one as ZEO invalidations: soon, not at once.
        wait_until(lambda: q.dead_count() == 0, 10, "the requeue to reach this process")
        with q.connect() as c:
            c.reject(c.get())
        assert q.dead_count() == 1
        command("purge", "--dead", "--yes")
        wait_until(lambda: q.dead_count() == 0, 10, "the purge to reach this process")
        wait_until(lambda: q.qsize() == 4 and not q.paused, 10, "4 ready, not paused")


def test_drop_on_a_file_processes_share_says_what_to_stop_and_what_to_type(tmp_path, capsys):
    path = str(tmp_path / "jobs.fs")
    with ackqueue.AckQueue(path, name="old") as q:
        q.put("x")
    with ackqueue.AckQueue(path, name="jobs", shared=True):
        assert cli.main(["drop", path, "--name", "old", "--yes"]) == 1
        err = capsys.readouterr().err
        assert "is in use by processes that share it" in err
        assert f"then run: ackqueue drop {path} --name old --yes" in err
    with ackqueue.AckQueue(path, name="old", shared=True) as q:
        assert q.qsize() == 1  # nothing dropped
