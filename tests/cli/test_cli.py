"""The ``ackqueue`` command line: reading live and closed files, changing closed ones, errors."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT, child_env, spawn_child
from polling import wait_until

import ackqueue
from ackqueue.cli.commands import main
from ackqueue.queue.status import read_status


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def fill(path, items, name="default"):
    with ackqueue.AckQueue(path, name=name) as q:
        for item in items:
            q.put(item)


def test_stats_counts_a_closed_queue(qpath, capsys):
    fill(qpath, range(7))
    code, out, _ = run(capsys, "stats", qpath, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["live_pid"] is None and report["holds_known"]
    (queue,) = report["queues"]
    assert (queue["name"], queue["ready"], queue["held"], queue["stored"]) == ("default", 7, 0, 7)
    assert queue["oldest_ready_age"] >= 0
    assert 0 < report["live_size"] <= report["file_size"]
    code, out, _ = run(capsys, "stats", qpath)
    assert code == 0 and "not open in any process" in out and "ready   7" in out


def test_stats_on_a_big_queue_reads_a_bounded_part_and_says_so(qpath, capsys, monkeypatch):
    from ackqueue.cli import inspection

    fill(qpath, range(40))
    code, out, _ = run(capsys, "stats", qpath, "--json")
    exact = json.loads(out)
    monkeypatch.setattr(inspection, "OLDEST_SCAN", 10)
    monkeypatch.setattr(inspection, "LIVE_SAMPLE", 8)
    code, out, _ = run(capsys, "stats", qpath, "--json")
    bounded = json.loads(out)
    assert exact["live_size_exact"] and exact["queues"][0]["oldest_ready_exact"]
    assert not bounded["live_size_exact"] and not bounded["queues"][0]["oldest_ready_exact"]
    assert bounded["queues"][0]["ready"] == 40  # counts never come from the sample
    assert 0.3 < bounded["live_size"] / exact["live_size"] < 3
    code, out, _ = run(capsys, "stats", qpath)
    assert "live data about" in out and "among the first" in out


def test_peek_shows_the_next_items_in_delivery_order(qpath, capsys):
    fill(qpath, [{"n": n} for n in range(5)])
    code, out, _ = run(capsys, "peek", qpath, "-n", 2, "--json")
    assert code == 0
    assert [p["item"] for p in json.loads(out)] == [{"n": 0}, {"n": 1}]
    code, out, _ = run(capsys, "peek", qpath, "-n", 3)
    assert out.splitlines()[0].startswith("   1. {'n': 0}") and len(out.splitlines()) == 3


def test_name_selects_one_of_several_queues(qpath, capsys):
    fill(qpath, ["a1"], name="a")
    fill(qpath, ["b1", "b2"], name="b")
    code, _, err = run(capsys, "peek", qpath)
    assert code == 1 and "--name" in err and "'a'" in err
    code, out, _ = run(capsys, "peek", qpath, "--name", "b", "--json")
    assert [p["item"] for p in json.loads(out)] == ["b1", "b2"]
    code, _, err = run(capsys, "stats", qpath, "--name", "zz")
    assert code == 1 and "no queue named 'zz'" in err


def test_stats_on_a_file_a_live_process_holds_shows_its_holds(qpath, capsys):
    fill(qpath, range(5))
    holder = spawn_child(
        "import sys, threading, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1])\n"
        "c = q.connect()\n"
        "c.get(); c.get()\n"
        "print('holding', flush=True)\n"
        "sys.stdin.read()\n",
        qpath,
    )
    try:
        assert holder.stdout.readline() == "holding\n"
        deadline = time.monotonic() + 10
        while True:  # the holder writes its status file within a second or so
            code, out, _ = run(capsys, "stats", qpath, "--json")
            report = json.loads(out)
            if report["queues"][0]["held"] == 2 or time.monotonic() > deadline:
                break
        assert code == 0 and report["live_pid"] == holder.pid
        queue = report["queues"][0]
        assert (queue["ready"], queue["held"], queue["stored"]) == (3, 2, 5)
        assert [h["owner"] for h in queue["held_items"]] == ["MainThread", "MainThread"]
        assert all(h["attempts"] >= 1 and h["age"] >= 0 for h in queue["held_items"])
        code, out, _ = run(capsys, "stats", qpath)
        assert f"open in process {holder.pid}; reading it read-only" in out
        code, out, _ = run(capsys, "peek", qpath, "--json")
        assert [p["state"] for p in json.loads(out)] == ["held", "held", "ready", "ready", "ready"]
        # A change is a request the live process carries out (issue 25), holds untouched.
        code, out, err = run(capsys, "purge", qpath, "--ready", "--yes")
        assert code == 0 and "purged 3 ready items" in out, err
        code, out, _ = run(capsys, "peek", qpath, "--json")
        assert [p["state"] for p in json.loads(out)] == ["held", "held"]
    finally:
        holder.communicate("", timeout=30)
    assert not os.path.exists(qpath + ".status"), "the status file outlived its queue"


def test_a_killed_holders_leftover_status_file_is_ignored(qpath, capsys):
    fill(qpath, range(4))
    holder = spawn_child(
        "import sys, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1])\n"
        "c = q.connect()\n"
        "c.get(); c.get(); c.get()\n"
        "print('holding', flush=True)\n"
        "sys.stdin.read()\n",
        qpath,
    )
    assert holder.stdout.readline() == "holding\n"
    deadline = time.monotonic() + 10
    while not os.path.exists(qpath + ".status"):
        assert time.monotonic() < deadline, "the holder never wrote its status file"
        time.sleep(0.02)
    holder.kill()
    holder.wait(30)
    assert os.path.exists(qpath + ".status")  # SIGKILL left it behind
    code, out, _ = run(capsys, "stats", qpath, "--json")
    report = json.loads(out)
    assert code == 0 and report["live_pid"] is None and report["holds_age"] is None
    queue = report["queues"][0]
    assert (queue["ready"], queue["held"], queue["held_items"]) == (4, 0, [])



def test_stats_on_a_file_this_process_holds_follows_its_holds_as_they_change(qpath, capsys):
    """The status file as written by this process's own thread (the tests above read a child
    process's): the live pid, fresh holds, each change within a round, and gone on close."""

    def stats() -> dict:
        code, out, err = run(capsys, "stats", qpath, "--json")
        assert code == 0, err
        return json.loads(out)

    with ackqueue.AckQueue(qpath) as q, q.connect() as c:
        q.put_many(range(4))
        first = c.get()
        wait_until(lambda: stats()["queues"][0]["held"] == 1, timeout=10, what="one hold shown")
        second = c.get()
        wait_until(lambda: stats()["queues"][0]["held"] == 2, timeout=10, what="two holds shown")
        report = stats()
        assert report["live_pid"] == os.getpid()
        assert 0 <= report["holds_age"] < 60
        queue = report["queues"][0]
        assert (queue["ready"], queue["stored"]) == (2, 4)
        assert len(queue["held_items"]) == 2
        c.ack(first)
        c.ack(second)
    assert not os.path.exists(qpath + ".status"), "the status file outlived its queue"


def test_a_queue_opened_again_writes_its_status_file_again(qpath):
    with ackqueue.AckQueue(qpath):
        wait_until(lambda: os.path.exists(qpath + ".status"), what="the status file")
    assert not os.path.exists(qpath + ".status")
    with ackqueue.AckQueue(qpath):  # nothing held, as when it closed: still written anew
        wait_until(lambda: os.path.exists(qpath + ".status"), what="the status file again")


def test_a_status_file_that_is_not_a_json_object_is_ignored(qpath):
    for body in ("[1, 2]", "42", "not json", ""):
        with open(qpath + ".status", "w") as f:
            f.write(body)
        assert read_status(qpath) is None, body

def test_stats_reads_a_file_while_a_live_process_keeps_committing(qpath, capsys):
    writer = spawn_child(
        "import sys, threading, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1])\n"
        "stop = threading.Event()\n"
        "threading.Thread(target=lambda: (sys.stdin.read(), stop.set())).start()\n"
        "n = 0\n"
        "while not stop.is_set():\n"
        "    q.put('x' * 100); n += 1\n"
        "    if n == 50: print('writing', flush=True)\n",
        qpath,
    )
    try:
        assert writer.stdout.readline() == "writing\n"
        counts: list[int] = []

        def grown() -> bool:
            code, out, err = run(capsys, "stats", qpath, "--json")
            assert code == 0, err
            counts.append(json.loads(out)["queues"][0]["stored"])
            return len(counts) >= 4 and counts[-1] > counts[0]

        # The writer is a process of its own: on a loaded machine several reads may come
        # between two of its commits, so read until one sees a later commit.
        wait_until(grown, timeout=60, what="stats seeing the writer's later commits")
        assert counts == sorted(counts) and counts[0] >= 50
    finally:
        writer.communicate("", timeout=30)


def test_purge_needs_yes_then_removes_every_ready_item(qpath, capsys):
    fill(qpath, range(300))
    code, _, err = run(capsys, "purge", qpath, "--ready")
    assert code == 1 and "would delete 300 ready items" in err and "--yes" in err
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 300
    code, out, _ = run(capsys, "purge", qpath, "--ready", "--yes")
    assert code == 0 and "purged 300" in out
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_long_operations_report_progress_at_most_once_a_second(capsys):
    from ackqueue.cli import commands as cli

    clock = iter([0.0, 0.5, 1.2, 1.4, 2.5])
    progress = cli.Progress("purged", clock=lambda: next(clock))
    for done in (100, 200, 300, 400):
        progress(done, 1000)
    assert capsys.readouterr().err.splitlines() == ["  purged: 200/1,000", "  purged: 400/1,000"]


def churn(path, count, keep_every, name="default"):
    """Put ``count`` items and take all but every ``keep_every``-th back out: garbage to pack."""
    with ackqueue.AckQueue(path, name=name) as q:
        for n in range(count):
            q.put(n)
            if n % keep_every:
                q.get()


def test_pack_shrinks_a_churned_file_and_keeps_the_items(qpath, capsys):
    churn(qpath, 300, keep_every=3)
    before = os.path.getsize(qpath)
    code, out, _ = run(capsys, "pack", qpath)
    assert code == 0 and "packed" in out
    assert os.path.getsize(qpath) < before
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 100


def test_requeue_held_explains_that_a_closed_file_holds_nothing(qpath, capsys):
    fill(qpath, range(3))
    code, out, _ = run(capsys, "requeue", qpath, "--held")
    assert code == 0 and "nothing is held" in out and "3 stored items are ready" in out


def test_dead_letters_can_be_listed_requeued_and_purged(qpath, capsys):
    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        for item in ("bad-1", "bad-2"):
            q.put(item)
        with q.connect() as c:
            for _ in range(2):
                c.reject(c.get(), reason="unparseable")
    code, out, _ = run(capsys, "dead", qpath, "--json")
    letters = json.loads(out)
    assert code == 0 and sorted(d["item"] for d in letters) == ["bad-1", "bad-2"]
    assert all(d["reason"] == "unparseable" for d in letters)
    code, out, _ = run(capsys, "stats", qpath, "--json")
    assert json.loads(out)["queues"][0]["dead"] == 2
    code, _, err = run(capsys, "requeue", qpath, "--dead")
    assert code == 1 and "--yes" in err
    code, out, _ = run(capsys, "requeue", qpath, "--dead", "--yes")
    assert code == 0 and "requeued 2" in out
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 2 and q.dead_letters() == []
        with q.connect() as c:
            c.reject(c.get(), reason="again")
    code, out, _ = run(capsys, "purge", qpath, "--dead", "--yes")
    assert code == 0 and "purged 1 dead letter" in out
    with ackqueue.AckQueue(qpath) as q:
        assert q.dead_letters() == [] and q.qsize() == 1


def test_delayed_items_are_counted_apart_from_ready_ones(qpath, capsys):
    with ackqueue.AckQueue(qpath) as q:
        q.put("now")
        q.put("in an hour", delay=3600)
    code, out, _ = run(capsys, "stats", qpath, "--json")
    queue = json.loads(out)["queues"][0]
    assert (queue["ready"], queue["delayed"], queue["stored"]) == (1, 1, 2)
    code, out, _ = run(capsys, "peek", qpath, "--json")
    assert [(p["item"], p["state"]) for p in json.loads(out)] == [
        ("now", "ready"), ("in an hour", "delayed"),
    ]


def test_stats_counts_a_priority_queue_of_unhashable_items(qpath, capsys):
    with ackqueue.PriorityAckQueue(qpath) as q:
        q.put((1, {"url": "/a"}))
        q.put((0, {"url": "/b"}), delay=3600)
    code, out, err = run(capsys, "stats", qpath, "--json")
    assert code == 0, err
    queue = json.loads(out)["queues"][0]
    assert (queue["ready"], queue["delayed"], queue["stored"]) == (1, 1, 2)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "no such queue file"),
        (lambda p: pathlib.Path(p).write_text("not a database"), "is not a ZODB FileStorage file"),
        (lambda p: os.mkdir(p), "is a directory"),
    ],
    ids=["missing", "not-a-filestorage", "directory"],
)
def test_bad_paths_give_one_clear_line_and_a_nonzero_exit(qpath, capsys, make, message):
    make(qpath)
    for command in (["stats", qpath], ["peek", qpath], ["pack", qpath],
                    ["purge", qpath, "--ready", "--yes"]):
        code, out, err = run(capsys, *command)
        assert code == 1 and out == ""
        assert message in err and len(err.strip().splitlines()) == 1


def test_a_zodb_file_without_queues_is_not_a_queue(qpath, capsys):
    import ZODB
    import ZODB.FileStorage

    db = ZODB.DB(ZODB.FileStorage.FileStorage(qpath))
    with db.transaction() as conn:
        conn.root()["something"] = 1
    db.close()
    code, _, err = run(capsys, "stats", qpath)
    assert code == 1 and "holds no ackqueue queues" in err


def test_python_dash_m_and_the_console_script_entry_run_the_same_cli(qpath):
    fill(qpath, ["x"])
    result = subprocess.run(
        [sys.executable, "-m", "ackqueue", "peek", qpath, "--json"],
        env=child_env(), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0 and json.loads(result.stdout)[0]["item"] == "x"
    with open(os.path.join(REPO_ROOT, "setup.cfg")) as f:
        assert "ackqueue = ackqueue.cli:main" in f.read()


def test_pause_and_resume_from_the_command_line(qpath, capsys):
    with ackqueue.AckQueue(qpath) as q:
        q.put("job")
    assert main(["pause", qpath]) == 0
    out = capsys.readouterr().out
    assert "paused queue 'default'" in out and "`" not in out  # plain text, not Markdown
    assert main(["pause", qpath]) == 0
    assert "paused already" in capsys.readouterr().out
    with ackqueue.AckQueue(qpath) as q:
        assert q.paused
        with pytest.raises(ackqueue.Empty):
            q.get_nowait()
    assert main(["resume", qpath]) == 0
    assert main(["resume", qpath]) == 0
    assert "queue 'default' is not paused\n" in capsys.readouterr().out
    with ackqueue.AckQueue(qpath) as q:
        assert not q.paused and q.get_nowait() == "job"


def test_a_paused_queue_says_so_in_stats_peek_groups_and_top(qpath, capsys):
    import io

    from ackqueue.cli.top import run_top

    fill(qpath, ["a", "b"], name="jobs")
    views = [("stats",), ("peek",), ("groups",)]
    for view in views:  # not paused: not a word of it
        assert "PAUSED" not in run(capsys, *view, qpath, "--name", "jobs")[1]
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        q.pause()
    resume = f"ackqueue resume {qpath} --name jobs"
    for view in views:
        code, out, _ = run(capsys, *view, qpath, "--name", "jobs")
        assert code == 0 and f"PAUSED: nothing is handed out until resumed ({resume})" in out
    assert "when the queue is resumed" in run(capsys, "groups", qpath, "--name", "jobs")[1]
    code, out, _ = run(capsys, "stats", qpath, "--json")
    assert [q["paused"] for q in json.loads(out)["queues"]] == [True]
    code, out, _ = run(capsys, "peek", qpath, "--name", "jobs", "--json")
    assert [i["queue_paused"] for i in json.loads(out)] == [True, True]
    code, out, _ = run(capsys, "groups", qpath, "--name", "jobs", "--json")
    assert [g["queue_paused"] for g in json.loads(out)] == [True]
    shown = io.StringIO()
    run_top(qpath, "jobs", True, 1, 0.0, out=shown)
    assert json.loads(shown.getvalue())["queues"][0]["paused"] is True
    shown = io.StringIO()
    run_top(qpath, "jobs", False, 1, 0.0, out=shown)
    assert "queue 'jobs' (fifo): PAUSED" in shown.getvalue()
