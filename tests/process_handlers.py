"""Handlers for the ``ProcessPool`` tests: top-level functions of an importable module, as a
pool's worker processes (fresh interpreters) need them. Each item is a dict with ``n`` and the
test's directory ``dir``; handlers append one line per event to ``dir/log`` (short appends,
whole lines even with several processes writing)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import ackqueue

WAIT = 60.0  # the longest a handler waits for the test (a bound, not a sleep)


def note(item: dict[str, Any], what: str) -> None:
    with open(os.path.join(item["dir"], "log"), "a") as f:
        f.write(f"{what} {item['n']} {os.getpid()}\n")


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT} s for {what}")
        time.sleep(0.01)  # polling for another process's file, with a deadline


def together(item: dict[str, Any]) -> None:
    """Record the item; a process's first item waits until ``item["processes"]`` processes
    have each started one, so that the run proves they worked at the same time."""
    marker = os.path.join(item["dir"], f"started-{os.getpid()}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        wait_for(lambda: sum(name.startswith("started-") for name in os.listdir(item["dir"]))
                 >= item["processes"], "the other worker processes")
    note(item, "done")


def hang_first(item: dict[str, Any]) -> None:
    """Item 0 hangs the first time (until its process is killed); everything else is done."""
    hung = os.path.join(item["dir"], "hung")
    if item["n"] == 0 and not os.path.exists(hung):
        with open(hung + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(hung + ".tmp", hung)
        threading.Event().wait()
    note(item, "done")


def until_released(item: dict[str, Any]) -> None:
    """Note the start, wait until the test creates ``dir/release``, then finish."""
    note(item, "started")
    wait_for(lambda: os.path.exists(os.path.join(item["dir"], "release")), "the release")
    note(item, "done")


def burn(item: dict[str, Any]) -> int:
    """CPU work (about ``item["work"]`` loop steps) with no I/O: what processes are for."""
    total = 0
    for i in range(item["work"]):
        total += i * i % 7
    return total


class SigintWhileOpening(ackqueue.AckQueue):  # type: ignore[type-arg]
    """A ``kind`` for ProcessPool: the first worker process to open the queue sends SIGINT to
    the pool (whose pid and a flag file's path are in the environment) and is still opening
    it when the pool passes the signal on, as after a Ctrl-C in a pool's first second."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        flag = os.environ["ACKQUEUE_TEST_FLAG"]
        # (The pool opens the queue itself first, in the test's process: not there.)
        if multiprocessing.parent_process() is not None and not os.path.exists(flag):
            open(flag, "w").close()
            os.kill(int(os.environ["ACKQUEUE_TEST_POOL_PID"]), signal.SIGINT)
            time.sleep(2)
        super().__init__(*args, **kwargs)
