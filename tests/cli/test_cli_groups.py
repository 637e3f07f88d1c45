"""``ackqueue groups`` and ``ackqueue remove --group``."""

import json
import time

from conftest import spawn_child

import ackqueue
from ackqueue.cli.commands import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def fill(path):
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5), group="example.org")
        q.put_many(range(3), group="b.net")
        q.put("later", group="b.net", delay=600)
        q.put("plain")
        q.pause_group("example.org", 300)


def test_removing_a_group_with_nothing_waiting_says_so_and_succeeds_without_yes(qpath, capsys):
    fill(qpath)
    code, out, err = run(capsys, "remove", qpath, "--group", "nobody.org")
    assert (code, err) == (0, "") and "no waiting items; nothing to remove" in out
    code, out, _ = run(capsys, "remove", qpath, "--group", "nobody.org", "--yes")
    assert code == 0 and "removed 0 items" in out and "(s)" not in out
    code, out, _ = run(capsys, "groups", qpath)
    assert "3 groups" in out and "(s)" not in out


def test_groups_shows_items_ready_delayed_and_next_due_per_group(qpath, capsys):
    fill(qpath)
    code, out, _ = run(capsys, "groups", qpath, "--json")
    assert code == 0
    rows = {r["group"]: r for r in json.loads(out)}
    assert [(r["items"], r["ready"], r["held"], r["delayed"]) for r in rows.values()] == [
        (5, 5, 0, 0), (4, 3, 0, 1), (1, 1, 0, 0)
    ]
    now = time.time()
    assert rows["example.org"]["next_due"] > now + 200  # paused
    assert rows["b.net"]["next_due"] <= now
    code, out, _ = run(capsys, "groups", qpath)
    assert "example.org" in out and "(paused" in out and "(no group)" in out


def test_groups_counts_what_a_live_process_holds(qpath, capsys):
    fill(qpath)
    holder = spawn_child(
        "import sys, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1])\n"
        "c = q.connect()\n"
        "c.get(); c.get()\n"  # b.net 0, then the ungrouped one: example.org is paused
        "print('holding', flush=True)\n"
        "sys.stdin.read()\n",
        qpath,
    )
    try:
        assert holder.stdout.readline() == "holding\n"
        deadline = time.monotonic() + 10
        while True:  # the holder writes its status file within a second or so
            code, out, _ = run(capsys, "groups", qpath, "--json")
            rows = {r["group"]: r for r in json.loads(out)}
            if rows["b.net"]["held"] or time.monotonic() > deadline:
                break
        assert sum(r["held"] for r in rows.values()) == 2
    finally:
        holder.communicate("", timeout=30)


def test_remove_group_needs_yes_then_removes_the_groups_items(qpath, capsys):
    fill(qpath)
    code, _, err = run(capsys, "remove", qpath, "--group", "b.net")
    assert code == 1 and "would remove 4 waiting items of group 'b.net'" in err and "--yes" in err
    code, out, _ = run(capsys, "remove", qpath, "--group", "b.net", "--yes")
    assert code == 0 and "removed 4 items of group 'b.net'" in out
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 1  # "plain"; example.org is paused
        assert q.delayed_count() == 0


def test_groups_of_a_big_queue_reports_its_progress_on_stderr(qpath, capsys, monkeypatch):
    from ackqueue.cli import groups

    with ackqueue.AckQueue(qpath) as q:
        q.put_many(range(25_000), group="big.example")
    ticks = iter(range(0, 10**6, 2))  # every reading two seconds after the last: all shown
    real = groups.Progress
    monkeypatch.setattr(groups, "Progress", lambda what: real(what, clock=lambda: next(ticks)))
    code, out, err = run(capsys, "groups", qpath, "--json")
    assert code == 0 and json.loads(out)[0]["items"] == 25_000  # stdout stays pure JSON
    assert "reading entries: 10,000/25,000" in err and "20,000/25,000" in err
