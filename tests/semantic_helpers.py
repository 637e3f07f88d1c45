"""Helpers for the delivery-semantics tests: deadlines instead of sleeps, killable children."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

from conftest import child_argv, child_env
from polling import wait_until  # noqa: F401 - re-exported for the semantics tests


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter importing this tree; return how it ended."""
    return subprocess.run(
        child_argv(code, *args), env=child_env(), capture_output=True, text=True, timeout=timeout
    )


def run_and_maybe_kill(
    code: str, *args: str, rng: random.Random, max_events: int, timeout: float = 60
) -> tuple[bool, str]:
    """Start ``code``; once it prints ``ready``, let it print a random number of lines (one per
    step of its work, up to ``max_events``) and SIGKILL it, unless it ended by then. Return
    (finished by itself, its stdout after ``ready``).

    The kill point is counted in the child's own steps, not in seconds, so a kill lands as
    often on a fast disk (or tmpfs) as on a slow one."""
    proc = subprocess.Popen(
        child_argv(code, *args), env=child_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if first.strip() != "ready":
        out = first + proc.stdout.read()
        proc.wait(timeout)
        return proc.returncode == 0, out
    seen = []
    for _ in range(rng.randint(0, max_events)):
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
    else:
        proc.send_signal(signal.SIGKILL)
    out = "".join(seen) + proc.stdout.read()
    proc.wait(timeout)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed with {proc.returncode}: {out}")
    return proc.returncode == 0, out


@contextlib.contextmanager
def put_in_flight(q: Any, item: object = "in flight", **options: Any) -> Iterator[None]:
    """Within the block, a put of ``item`` (with ``options``) on ``q`` is staged (counted) but
    cannot commit: a change that touches nothing keeps the queue's committer busy until the
    block ends."""
    release = threading.Event()
    committer_busy = threading.Event()

    def wait() -> None:
        committer_busy.set()
        release.wait(30)

    holder = threading.Thread(target=q._store.run, args=(wait,))
    holder.start()
    putter = threading.Thread(target=q.put, args=(item,), kwargs=options)
    try:
        assert committer_busy.wait(10)
        putter.start()
        wait_until(lambda: q._supply.staged == 1)
        yield
    finally:
        release.set()
        holder.join(10)
        if putter.ident is not None:
            putter.join(10)
