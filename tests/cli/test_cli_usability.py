"""What a new user of the command line tripped on (issue 15): each case as it was seen."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
from test_cli import churn, fill, run

import ackqueue
from ackqueue.cli import changing
from ackqueue.cli import commands as cli


def test_pack_is_file_wide_and_needs_no_name_on_a_file_of_several_queues(qpath, capsys):
    for name in ("frontier", "pages"):
        churn(qpath, 200, keep_every=2, name=name)
    before = os.path.getsize(qpath)
    code, out, err = run(capsys, "pack", qpath)
    assert code == 0, err
    after = os.path.getsize(qpath)
    assert after < before
    assert f"{before:,} -> {after:,} bytes" in out  # the sizes ls shows
    for name in ("frontier", "pages"):
        with ackqueue.AckQueue(qpath, name=name) as q:
            assert q.qsize() == 100


def test_peek_with_zero_shows_none_and_a_negative_count_is_an_error(qpath, capsys):
    fill(qpath, range(6))
    code, out, _ = run(capsys, "peek", qpath, "-n", 0)
    assert code == 0 and "is empty" not in out and "6 stored items, none shown" in out
    code, out, _ = run(capsys, "peek", qpath, "-n", 0, "--json")
    assert json.loads(out) == []
    with pytest.raises(SystemExit) as exit_:
        cli.main(["peek", qpath, "-n", "-1"])
    assert exit_.value.code == 2 and "must be 0 or more" in capsys.readouterr().err
    code, out, _ = run(capsys, "peek", qpath, "-n", 3)
    assert len(out.splitlines()) == 3


def test_requeue_held_does_not_call_a_delayed_item_ready(qpath, capsys):
    with ackqueue.AckQueue(qpath) as q:
        q.put("now")
        q.put("later", delay=3600)
    code, out, _ = run(capsys, "requeue", qpath, "--held")
    assert code == 0 and "1 stored item is ready already, and 1 delayed until due" in out


def test_purge_or_requeue_with_nothing_to_do_says_so_and_succeeds_without_yes(qpath, capsys):
    fill(qpath, range(2))
    code, out, err = run(capsys, "purge", qpath, "--dead")
    assert (code, err) == (0, "") and "no dead letters; nothing to purge" in out
    code, out, err = run(capsys, "requeue", qpath, "--dead")
    assert (code, err) == (0, "") and "nothing to requeue" in out


def test_counts_are_plural_aware_with_thousands_separators(qpath, capsys):
    with ackqueue.AckQueue(qpath, max_attempts=5) as q:
        q.put_many(range(1500))
        with q.connect() as c:
            c.reject(c.get(), reason="bad")
    code, out, _ = run(capsys, "dead", qpath)
    assert "[1 attempt," in out and "1 attempts" not in out
    code, out, _ = run(capsys, "stats", qpath)
    assert "ready   1,499" in out and "stored  1,499" in out
    code, _, err = run(capsys, "purge", qpath, "--ready")
    assert "would delete 1,499 ready items" in err
    code, _, err = run(capsys, "purge", qpath, "--dead")
    assert "would delete 1 dead letter of" in err


def test_help_has_no_rest_markup_and_there_is_a_version(capsys):
    subparsers = next(a for a in cli.build_parser()._actions if a.dest == "command")
    names = sorted(subparsers.choices)  # every command, those added later included
    assert {"stats", "bench", "groups", "remove"} <= set(names)
    for argv in ([], *([name] for name in names)):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--help"])
        text = capsys.readouterr().out
        assert "usage: ackqueue" in text and "`" not in text, text
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("ackqueue ")


def test_json_gives_items_as_json_values_and_flags_the_others_as_repr(qpath, capsys):
    fill(qpath, [{"order": 0, "tags": ["a"]}, 7, "text", None, (1, 2), {1: "int key"}, {1, 2}])
    code, out, _ = run(capsys, "peek", qpath, "--json")
    shown = [(p["item"], p["item_is_repr"]) for p in json.loads(out)]
    assert shown == [
        ({"order": 0, "tags": ["a"]}, False), (7, False), ("text", False), (None, False),
        ("(1, 2)", True), ("{1: 'int key'}", True), ("{1, 2}", True),
    ]


def test_drop_deletes_one_named_queue_after_yes_and_keeps_the_others(qpath, capsys):
    fill(qpath, range(3), name="typo")
    fill(qpath, range(2), name="jobs")
    code, _, err = run(capsys, "drop", qpath, "--name", "typo")
    assert code == 1 and "would delete queue 'typo'" in err and "3 stored items" in err
    code, out, _ = run(capsys, "drop", qpath, "--name", "typo", "--yes")
    assert code == 0 and "dropped queue 'typo'" in out and "'jobs'" in out
    code, out, _ = run(capsys, "stats", qpath, "--json")
    assert [q["name"] for q in json.loads(out)["queues"]] == ["jobs"]
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        assert q.qsize() == 2
    code, _, err = run(capsys, "drop", qpath, "--name", "typo", "--yes")
    assert code == 1 and "no queue named 'typo'" in err
    with pytest.raises(SystemExit):  # never a default: the name is always spelled out
        cli.main(["drop", qpath, "--yes"])


def test_drop_refuses_a_file_a_live_process_has_open_saying_what_to_type(qpath, capsys):
    fill(qpath, range(1), name="other")
    with ackqueue.AckQueue(qpath, name="jobs"):
        code, _, err = run(capsys, "drop", qpath, "--name", "other", "--yes")
    assert code == 1 and f"is open in process {os.getpid()}" in err
    assert f"Stop process {os.getpid()}, then run: ackqueue drop {qpath} --name other --yes" in err
    with ackqueue.AckQueue(qpath, name="other") as q:
        assert q.qsize() == 1  # nothing dropped


def test_stats_on_an_unreachable_zeo_server_fails_fast_naming_it(capsys):
    with socket.socket() as s:  # a port that was free a moment ago: nobody listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    code, out, err = run(capsys, "stats", f"zeo://127.0.0.1:{port}")
    assert time.monotonic() - started < 10  # ZEO alone waits 30 s in silence
    assert code == 1 and out == ""
    assert f"cannot reach the ZEO server at 127.0.0.1:{port}" in err


def test_peek_of_many_items_reports_progress(qpath, capsys, monkeypatch):
    with ackqueue.AckQueue(qpath) as q:
        q.put_many(range(25_000))
    ticks = iter(range(0, 10**6, 2))  # every reading two seconds after the last: all shown
    real = cli.Progress
    monkeypatch.setattr(cli, "Progress", lambda what: real(what, clock=lambda: next(ticks)))
    code, out, err = run(capsys, "peek", qpath, "-n", 25_000)
    assert code == 0 and len(out.splitlines()) == 25_000
    assert "reading items: 10,000/25,000" in err and "20,000/25,000" in err


def test_pack_progress_reports_the_growing_pack_file(tmp_path):
    growing = tmp_path / "q.fs.pack"
    reported: list[tuple[int, int]] = []
    seen = threading.Event()

    def progress(done: int, total: int) -> None:
        reported.append((done, total))
        seen.set()

    def work() -> None:
        growing.write_bytes(b"x" * 1234)
        assert seen.wait(10), "no progress while the pack file grew"

    changing._with_file_progress(work, str(growing), 5000, progress)
    assert (1234, 5000) in reported


def test_peek_shows_the_users_key_group_and_due_time_not_the_internal_position(qpath, capsys):
    with ackqueue.AckQueue(qpath) as q:
        q.put({"url": "u1"}, key="u1", group="example.org")
        q.put("later", delay=600)
        q.put("plain")
    code, out, _ = run(capsys, "peek", qpath, "--json")
    assert code == 0
    first, later, plain = json.loads(out)
    assert (first["key"], first["group"], first["due_in"]) == ("u1", "example.org", None)
    assert (later["key"], later["group"], later["state"]) == (None, None, "delayed")
    assert 590 < later["due_in"] <= 600
    assert [i["position"] for i in (first, later, plain)] == ["0", "1", "2"]
    code, out, _ = run(capsys, "peek", qpath)
    assert "[ready, key 'u1', group 'example.org', put " in out
    assert "'later'  [delayed, due in 10.0 min, put " in out or "due in 9.9 min" in out


def test_peek_json_cuts_a_huge_item_short_and_says_so_unless_whole(qpath, capsys):
    huge = "x" * 1_000_000
    with ackqueue.AckQueue(qpath) as q:
        q.put(huge)
        q.put("small")
    code, out, _ = run(capsys, "peek", qpath, "--json")
    assert code == 0 and len(out) < 20_000
    big, small = json.loads(out)
    assert big["item_truncated"] and big["item_is_repr"] and big["item"].endswith("...")
    assert big["size"] > 1_000_000
    assert small["item"] == "small" and not small["item_truncated"]
    code, out, _ = run(capsys, "peek", qpath)
    assert "--whole shows them whole" in out
    code, out, _ = run(capsys, "peek", qpath, "--json", "--whole")
    assert json.loads(out)[0]["item"] == huge and not json.loads(out)[0]["item_truncated"]


def test_pack_and_drop_help_say_what_their_options_mean(capsys):
    for command, says in (("pack", ["a pack is file-wide", "zeopack"]),
                          ("drop", ["the queue to delete", "no default", "not a storage URI"])):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert all(s in text for s in says), text
        assert "(default: 'default'" not in text
