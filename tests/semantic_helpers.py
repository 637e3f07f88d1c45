"""Helpers for the delivery-semantics tests: deadlines instead of sleeps, killable children."""

from __future__ import annotations

import random
import signal
import subprocess

from conftest import child_argv, child_env
from polling import wait_until  # noqa: F401 - re-exported for the semantics tests


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter importing this tree; return how it ended."""
    return subprocess.run(
        child_argv(code, *args), env=child_env(), capture_output=True, text=True, timeout=timeout
    )


def run_and_maybe_kill(
    code: str, *args: str, rng: random.Random, max_life: float, timeout: float = 60
) -> tuple[bool, str]:
    """Start ``code``; once it prints ``ready``, SIGKILL it after a random moment up to
    ``max_life`` seconds unless it ended by then. Return (finished by itself, its stdout)."""
    proc = subprocess.Popen(
        child_argv(code, *args), env=child_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if first.strip() != "ready":
        out = first + proc.stdout.read()
        proc.wait(timeout)
        return proc.returncode == 0, out
    try:
        proc.wait(rng.uniform(0, max_life))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    out = proc.stdout.read()
    proc.wait(timeout)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed with {proc.returncode}: {out}")
    return proc.returncode == 0, out
