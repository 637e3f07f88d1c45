"""examples/retry_with_backoff.py: flaky jobs retried with backoff, the poison one dead-lettered.

(drop_in.py and thread_pool.py are run by tests/project/test_examples.py.)
"""

import os
import signal
import subprocess
import sys

from conftest import REPO_ROOT, child_env


def run_example(name, *args):
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "examples", name), *map(str, args)],
        env=child_env(), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_retry_with_backoff_retries_flaky_jobs_until_done(qpath):
    out = run_example("retry_with_backoff.py", qpath)
    # two flaky jobs fail twice each; the poison job four times, then it is a dead letter
    failed = 2 * 2 + 4
    assert out.startswith(f"done 5, failed attempts {failed}")


def test_retry_with_backoff_sends_the_poison_job_to_the_dead_letters(qpath):
    out = run_example("retry_with_backoff.py", qpath)
    assert "dead 1" in out and "dead letter: 'poison' after 4 attempts" in out


def test_retry_with_backoff_interrupted_says_so_in_its_exit_code(qpath):
    child = subprocess.Popen(
        [sys.executable, os.path.join(REPO_ROOT, "examples", "retry_with_backoff.py"), qpath],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for line in child.stderr:  # the first failure: the pool is at work
            if "failed (attempt 1)" in line:
                break
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, out
    assert out.startswith("stopped by SIGINT after")
