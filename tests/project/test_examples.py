"""The examples run as a user would run them, in a fresh interpreter, and say what they did."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, child_env
from polling import wait_until

import ackqueue

EXAMPLES = os.path.join(REPO_ROOT, "examples")


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_drop_in_squares_twenty_numbers_and_finds_nothing_left_over(tmp_path):
    path = str(tmp_path / "drop_in.fs")
    first = run_example("drop_in.py", path)
    assert first.returncode == 0, first.stderr
    squares = sum(n * n for n in range(20))
    assert first.stdout.splitlines() == [
        "found 0 items left by an earlier run; squared 20 numbers:",
        str(squares),
    ]
    second = run_example("drop_in.py", path)  # the first run drained its queue
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0].startswith("found 0 items")


def test_drop_in_killed_midway_leaves_the_rest_for_the_second_run(tmp_path):
    path = str(tmp_path / "drop_in.fs")
    first = run_example("drop_in.py", path, "--crash-after", "5")
    assert first.returncode == 1 and first.stdout == "", first.stderr
    # It says why it stopped: it once died without a word.
    assert first.stderr.startswith("crashing on purpose after squaring 5 numbers"), first.stderr
    second = run_example("drop_in.py", path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        "found 16 items left by an earlier run; squared 15 numbers:",  # 15 numbers and the end
        str(sum(n * n for n in range(5, 20))),
    ]


def test_thread_pool_finishes_every_job_although_a_worker_dies(tmp_path):
    done = run_example("thread_pool.py", str(tmp_path / "pool.fs"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "worker died: this worker dies holding job 42" in lines
    assert lines[-1] == "100 of 100 jobs done; job 42 done: True"


def test_a_producer_and_two_worker_processes_share_one_file(tmp_path):
    path = str(tmp_path / "jobs.fs")
    assert run_example("shared_producer.py", path, "60").stdout == "put 60 jobs\n"
    workers = [
        subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "shared_worker.py"), path,
                          "--until-empty"], env=child_env(), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=60)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0]
    done = [int(out.split()[3]) for out in outs]
    assert sum(done) == 60
    results = run_example("shared_results.py", path)
    assert results.returncode == 0, results.stderr
    assert results.stdout.startswith(f"60 results, sum of squares {sum(n * n for n in range(60))}")


def test_a_shared_worker_stopped_by_ctrl_c_says_so_in_its_exit_status(tmp_path):
    worker = subprocess.Popen(
        [sys.executable, os.path.join(EXAMPLES, "shared_worker.py"), str(tmp_path / "jobs.fs")],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stderr is not None
        ready, _, _ = select.select([worker.stderr], [], [], 60)
        assert ready, "the worker never said it waits for jobs"
        assert worker.stderr.readline() == "waiting for jobs (Ctrl-C to stop)\n"
        worker.send_signal(signal.SIGINT)
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 130, out + err
    assert out.endswith("did 0 jobs; interrupted\n")


ALL_EXAMPLES = sorted(name for name in os.listdir(EXAMPLES) if name.endswith(".py"))


def test_every_example_is_here():
    assert len(ALL_EXAMPLES) >= 9 and "process_pool.py" in ALL_EXAMPLES, ALL_EXAMPLES


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_help_says_how_to_run_an_example_and_leaves_nothing_behind(tmp_path, name):
    # ``process_pool.py --help`` once took ``--help`` for its file: it ran the whole example
    # and left ``--help.fs`` and a server behind.
    helped = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "--help"],
                            cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                            timeout=60)
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert helped.stdout.startswith(f"usage: {name}"), helped.stdout
    wrong = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), "q", "--no-such-option"],
                           cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode == 2 and "unrecognized arguments: --no-such-option" in wrong.stderr
    assert os.listdir(tmp_path) == []


def test_a_shared_worker_stopped_mid_run_counts_exactly_the_jobs_it_committed(tmp_path):
    # Its "did N jobs" was one short when the Ctrl-C came between a job's commit and its count
    # (about one stop in three here): three workers in turn are each stopped while they work.
    path = str(tmp_path / "jobs.fs")
    assert run_example("shared_producer.py", path, "5000").returncode == 0
    said = {}
    for _ in range(3):
        worker = subprocess.Popen(
            [sys.executable, os.path.join(EXAMPLES, "shared_worker.py"), path],
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            with ackqueue.AckQueue(path, name="results", shared=True) as results:
                before = results.qsize()
                wait_until(lambda: results.qsize() >= before + 30, timeout=60,  # noqa: B023
                           what="the worker's results")
            worker.send_signal(signal.SIGINT)  # while it works: most of its time is in commits
            out, err = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.returncode == 130, out + err
        said[worker.pid] = int(out.split()[3])
    collected = run_example("shared_results.py", path).stdout
    by_worker = dict(part.split(": ") for part in collected.strip().split("by worker: ")[1]
                     .split(", "))
    assert {int(pid): int(n) for pid, n in by_worker.items()} == said, collected
