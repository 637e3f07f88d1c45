"""The suite's own guards: a failing test fails alone, and the run goes on to report every other
test (see tests/failure_guard.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO_ROOT, TESTS_DIR, child_env

FAILING_GIVEN = """
import relstorage.adapters.sqlite.adapter  # what the contract and shared tests import
from hypothesis import given, strategies as st

@given(st.integers())
def test_caught_by_hypothesis(n):
    assert n < 5

def test_after_it():
    pass
"""


# Garbage whose finalizer formats a traceback (as ZEO's futures do once their server has gone),
# collected at every allocation while the failing test is reported.
FAILING_AMID_FINALIZERS = """
import gc
import traceback

import pytest

RUNNING = []


class Noisy:
    def __del__(self):
        try:
            raise ValueError("logged by a finalizer")
        except ValueError as e:
            traceback.format_exception(e)
        if RUNNING:
            again = Noisy()
            again.me = again


@pytest.fixture
def finalizers_everywhere():
    RUNNING.append(True)
    gc.set_threshold(1)
    first = Noisy()
    first.me = first
    del first
    yield
    RUNNING.clear()
    gc.set_threshold(700, 10, 10)
    gc.collect()


def test_fails_while_finalizers_format_tracebacks(finalizers_everywhere):
    assert 1 == 2


def test_after_it():
    pass
"""


def _run_pytest(
    tmp_path, *plugins: str, source: str = FAILING_GIVEN
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_tiny.py").write_text(source)
    args = [f"-p{p}" for p in plugins]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_tiny.py"],
        cwd=tmp_path,
        env=child_env(PYTHONPATH=TESTS_DIR),
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_failing_given_test_fails_alone_and_the_run_goes_on(tmp_path):
    done = _run_pytest(tmp_path, "failure_guard")
    assert "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-3000:]
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
    # The example is still reported, as the call it makes; hypothesis's words around it change
    # between versions ("Falsifying example:" until 6.1xx, "Failing test case:" since).
    assert re.search(r"test_caught_by_hypothesis\((?:\s|E)*n=5\b", done.stdout), done.stdout[-3000:]


def test_a_test_failing_while_finalizers_parse_source_fails_alone(tmp_path):
    # Python 3.11's ast raised SystemError in pytest's own report (CPython gh-106905).
    done = _run_pytest(tmp_path, "failure_guard", source=FAILING_AMID_FINALIZERS)
    assert "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-3000:]
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
    assert "assert 1 == 2" in done.stdout, done.stdout[-3000:]


def test_the_campaigns_left_out_of_the_main_suite_run_in_ci():
    """README's test command leaves the long campaigns out (pyproject.toml's addopts), so that it
    stays under 10 minutes on 2 cores; CI must then run them itself, or they would never run."""
    with open(os.path.join(REPO_ROOT, "pyproject.toml")) as f:
        pyproject = f.read()  # (tomllib is Python 3.11's)
    assert re.search(r"""^addopts = ".*-m 'not campaign'.*"$""", pyproject, re.M), pyproject
    assert re.search(r'^    "campaign: ', pyproject, re.M), pyproject
    with open(os.path.join(REPO_ROOT, ".ci", "run")) as f:
        ci = f.read()
    readme_command = ci.index("python3 -m pytest)")
    assert re.search(r"^\s*python3 -m pytest -q -n 2 -m campaign\b", ci[readme_command:], re.M), ci
    # The sets CI runs again (tmpfs, other Pythons) keep their campaigns too.
    assert ci.count('-m ""') == 2, ci
    # The marker is on the campaigns (a sample), and a misspelt one fails the run.
    assert "--strict-markers" in pyproject
    with open(os.path.join(TESTS_DIR, "queue", "test_crash.py")) as f:
        crash = f.read()
    assert "@pytest.mark.campaign\ndef test_sigkill_at_random_moments" in crash
