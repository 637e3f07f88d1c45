"""Changing commands on a file one live process has open (without shared=True): each is a
request left beside the file, which that process carries out on its open queue and answers.

Real processes: the live one is a child interpreter; the requests go through the files."""

from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import spawn_child

import ackqueue
from ackqueue.cli import commands as cli
from ackqueue.queue import requests

LIVE = """
import json, sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], max_attempts=1)
q.put_many(["a", "b", "c"])
q.put("keyed", key="k1")
q.put("grouped", group="g")
with q.connect() as c:
    c.reject(c.get(), reason="bad")  # "a" goes to the dead letters
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps({"paused": q.paused, "qsize": q.qsize(), "dead": q.dead_count(),
                  "left": [q.get_nowait() for _ in range(q.qsize())]}), flush=True)
q.close()
"""


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stats(capsys, path):
    code, out, _ = run(capsys, "stats", path, "--json")
    assert code == 0
    return json.loads(out)["queues"][0]


def test_changing_commands_reach_a_live_single_process_queue_by_request(qpath, capsys):
    child = spawn_child(LIVE, qpath)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        code, out, err = run(capsys, "pause", qpath)
        assert code == 0 and "paused queue 'default'" in out, err
        assert f"open in process {child.pid}: that process makes the change" in err
        assert stats(capsys, qpath)["paused"]
        code, out, err = run(capsys, "requeue", "--dead", qpath, "--yes")
        assert code == 0 and "requeued 1 dead letter" in out, err
        code, out, err = run(capsys, "remove", qpath, "--key", "k1")
        assert code == 0 and "removed the item with key 'k1'" in out, err
        code, out, err = run(capsys, "remove", qpath, "--group", "g", "--yes")
        assert code == 0 and "removed 1 item of group 'g'" in out, err
        code, out, err = run(capsys, "pack", qpath)
        assert code == 0 and f"in process {child.pid}" in out, err
        code, out, err = run(capsys, "remove", qpath, "--key", "nope")
        assert code == 1 and f"process {child.pid} could not do it" in err
        assert "no live item with key 'nope'" in err
        code, out, err = run(capsys, "resume", qpath)
        assert code == 0 and "resumed queue 'default'" in out, err
        child.stdin.write("\n")
        child.stdin.flush()
        seen = json.loads(child.stdout.readline())
        # The live process's own queue changed, not only the file: b, c and the requeued a.
        assert seen == {"paused": False, "qsize": 3, "dead": 0, "left": ["b", "c", "a"]}
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
    assert not [n for n in os.listdir(os.path.dirname(qpath)) if ".request" in n or ".reply" in n]


def test_purge_of_a_live_queue_is_a_request_and_join_does_not_wait_for_purged_items(
    qpath, capsys
):
    code = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1], max_attempts=1)
q.put_many(range(1200))
with q.connect() as c:
    c.reject(c.get())
print("ready", flush=True)
sys.stdin.readline()
q.join()  # the purged items count as done
print(q.qsize(), q.dead_count(), flush=True)
q.close()
"""
    child = spawn_child(code, qpath)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        code_, _, err = run(capsys, "purge", "--ready", qpath)
        assert code_ == 1 and "would delete 1,199 ready items" in err
        code_, out, err = run(capsys, "purge", "--ready", qpath, "--yes")
        assert code_ == 0 and "purged 1,199 ready items" in out, err
        code_, out, err = run(capsys, "purge", "--dead", qpath, "--yes")
        assert code_ == 0 and "purged 1 dead letter" in out, err
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["0", "0"]
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait(30)


def test_a_request_not_owned_by_the_user_or_planted_as_a_link_is_never_followed(qpath, tmp_path):
    with ackqueue.AckQueue(qpath) as q:
        request = qpath + requests.REQUEST_SUFFIX
        body = json.dumps({"id": "0" * 32, "command": "pause", "queue": "default", "args": {}})
        decoy = tmp_path / "decoy.json"
        decoy.write_text(body)
        os.symlink(decoy, request)  # a link in the request's place: not followed
        requests.serve(qpath, [q])
        assert not q.paused and os.path.islink(request)
        with pytest.raises(requests.RequestError, match="another request waits"):
            requests.ask(qpath, "pause", "default", os.getpid(), pickup_timeout=0.2)
        assert decoy.read_text() == body  # written through nothing
        os.unlink(request)
        os.mkfifo(request, 0o600)  # nobody writes it: opening it to read must not hang
        requests.serve(qpath, [q])
        assert not q.paused
        os.unlink(request)
        fd = os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "w") as f:
            f.write(body)
        os.chmod(request, 0o666)  # others may write it: not to be trusted
        requests.serve(qpath, [q])
        assert not q.paused
        os.chmod(request, 0o600)
        requests.serve(qpath, [q])  # now the user's own request: carried out, answered
        assert q.paused and not os.path.exists(request)
        reply = qpath + requests.REPLY_SUFFIX + "0" * 32
        with open(reply) as f:
            assert json.loads(f.read())["done"] is True
        assert os.stat(reply).st_mode & 0o777 == 0o600
