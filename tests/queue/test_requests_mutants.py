"""Requests left beside a file for the process that has it open (ackqueue/queue/requests.py),
carried out in this process: the promises the mutation run of that module found untested
(benchmarks/mutation_survivors_queue.rst).

tests/cli/test_cli_requests.py covers the same commands end to end, with the live queue in a
child interpreter; here the queue is open in the test's own process, so that its status thread
takes the requests (once a second, as in any process) and every step can be checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from polling import wait_until

import ackqueue
from ackqueue.queue import requests


def ask(path: str, command: str, **arguments: Any) -> Any:
    """What the command line does: leave a request for this process, wait for the answer."""
    return requests.ask(path, command, "default", os.getpid(), **arguments)


def outcome_in_thread(call: Callable[[], Any], limit: float = 30.0) -> Any:
    """``call()`` run on a thread of its own: what it returned, or the exception it raised;
    the test fails if it is still waiting after ``limit`` seconds."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except Exception as exc:
            result["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still waiting after {limit} s"
    return result["value"]


def test_a_live_queue_carries_out_requests_and_answers_with_the_result_or_the_reason(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put_many(range(1200))  # more than one purge batch
        q.put("keyed", key=b"k")
        assert ask(qpath, "remove", key="k", bytes=True) is None  # a bytes key, sent as str
        assert q.qsize() == 1200
        with pytest.raises(requests.RequestError,
                           match=r"could not do it: .*no live item with key 'nope'"):
            ask(qpath, "remove", key="nope")
        assert ask(qpath, "purge_ready") == 1200
        assert q.qsize() == 0 and q.unfinished_tasks == 0
        assert ask(qpath, "pack") == os.path.getsize(qpath)
    assert not [n for n in os.listdir(os.path.dirname(qpath)) if ".request" in n or ".reply" in n]


def test_a_request_this_version_does_not_carry_out_is_refused_and_changes_nothing(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        size = os.path.getsize(qpath)
        for body in (
            {"id": "0" * 32, "command": "drop_everything", "queue": "default", "args": {}},
            {"id": "0" * 32, "command": "pause", "queue": "default", "args": ["x"]},
            {"id": "0" * 32, "command": "pause", "queue": 5, "args": {}},
        ):
            with pytest.raises(ValueError, match="not a request this version carries out"):
                requests.perform(qpath, [q], body)
        assert not q.paused and q.qsize() == 1 and os.path.getsize(qpath) == size


def test_a_request_for_a_queue_not_open_here_names_the_open_ones_but_any_open_queue_packs(
    qpath,
):
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        body = {"command": "pause", "queue": "mail", "args": {}}
        with pytest.raises(LookupError, match=(
            rf"queue 'mail' is not open in process {os.getpid()}, which has {qpath} open "
            r"\(its open queues: 'jobs'\)"
        )):
            requests.perform(qpath, [q], body)
        assert not q.paused
        message, size = requests.perform(qpath, [q], dict(body, command="pack"))  # file-wide
        assert message.startswith(f"packed {qpath}") and size == os.path.getsize(qpath)


def test_a_request_nobody_takes_fails_after_the_pickup_timeout_and_is_taken_back(tmp_path):
    path = str(tmp_path / "queue.fs")  # no queue of it is open here: nobody takes requests
    with pytest.raises(ValueError, match="no such request: 'drop'"):
        ask(path, "drop")
    failure = outcome_in_thread(lambda: requests.ask(
        path, "pause", "default", os.getpid(), pickup_timeout=0.3
    ), limit=10)
    assert isinstance(failure, requests.RequestError)
    assert f"process {os.getpid()} has {path} open but did not take the request" in str(failure)
    assert os.listdir(tmp_path) == []  # neither the request nor a draft of it stays


def test_purging_the_ready_items_takes_them_all_a_batch_a_commit_and_reports_progress(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put_many(range(1200))
        seen: list[tuple[int, int]] = []
        assert requests.purge_ready(q, lambda done, total: seen.append((done, total))) == 1200
        assert seen == [(500, 1200), (1000, 1200), (1200, 1200)]
        assert q.qsize() == 0 and q.unfinished_tasks == 0
        q.join()  # the purged items count as done


def test_a_request_taken_by_a_process_that_dies_before_answering_fails_saying_so(tmp_path):
    path = str(tmp_path / "queue.fs")
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        def take_then_die() -> None:
            request = path + requests.REQUEST_SUFFIX
            wait_until(lambda: os.path.lexists(request), 10, "the request")
            os.unlink(request)  # taken, as the live process's status thread takes it
            live.kill()
            live.wait(30)

        taker = threading.Thread(target=take_then_die, daemon=True)
        taker.start()
        failure = outcome_in_thread(
            lambda: requests.ask(path, "pause", "default", live.pid), limit=20
        )
        taker.join(30)
    finally:
        if live.poll() is None:
            live.kill()
            live.wait(30)
    assert isinstance(failure, requests.RequestError)
    assert f"process {live.pid} ended before it answered" in str(failure)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00{", b'["pause", "default"]'],
                         ids=["undecodable", "not-an-object"])
def test_a_file_in_the_requests_place_that_is_no_json_object_is_ignored(tmp_path, content):
    path = str(tmp_path / "queue.fs")  # a path no status thread serves: only this test does
    request = path + requests.REQUEST_SUFFIX
    with ackqueue.AckQueue(None) as q:
        with open(request, "wb") as f:  # the user's own file, but not a request
            f.write(content)
        os.chmod(request, 0o600)
        requests.serve(path, [q])  # nothing raised: the file is as good as unreadable
        assert not q.paused and os.path.exists(request)


def test_a_directory_in_the_requests_place_is_ignored_and_holds_no_descriptor(tmp_path):
    """requests._read_own opened a directory (os.open with O_RDONLY succeeds), then open(fd)
    raised IsADirectoryError, which serve let out, leaking the descriptor each second."""
    path = str(tmp_path / "queue.fs")
    request = path + requests.REQUEST_SUFFIX
    with ackqueue.AckQueue(None) as q:
        os.mkdir(request, 0o700)  # not a plain file: ignored, as the module's docstring says
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(3):  # the status thread looks once a second
            requests.serve(path, [q])
        assert len(os.listdir("/proc/self/fd")) == before
        assert not q.paused


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_request_owned_by_another_user_is_ignored(tmp_path):
    path = str(tmp_path / "queue.fs")
    request = path + requests.REQUEST_SUFFIX
    with ackqueue.AckQueue(None) as q:
        with open(request, "w") as f:
            json.dump({"id": "0" * 32, "command": "pause", "queue": "default", "args": {}}, f)
        os.chmod(request, 0o600)
        os.chown(request, 65534, 65534)  # nobody's: the request is not this user's to make
        requests.serve(path, [q])
        assert not q.paused and not os.path.exists(path + requests.REPLY_SUFFIX + "0" * 32)
        os.chown(request, os.geteuid(), os.getegid())  # the same request, the user's own
        requests.serve(path, [q])
        assert q.paused
