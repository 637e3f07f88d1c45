"""Shared helpers for the benchmark scripts: items, timing, medians, temporary files, tables."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

# Run from a checkout without installing: the benchmarks measure the tree they sit in.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The same items and CPU name as ``ackqueue bench``, so that their figures compare.
from ackqueue.cli.bench import cpu_model  # noqa: E402 - after the path
from ackqueue.cli.bench import item as item  # noqa: E402

# Source for a benchmark's child process: ``Conflicts.count`` counts the write conflicts its
# queue retried (from the ackqueue logger's debug records, which it then keeps to itself).
COUNT_CONFLICTS = r"""
import logging

class Conflicts(logging.Handler):
    count = 0
    def emit(self, record):
        if "conflict" in record.getMessage():
            Conflicts.count += 1

_log = logging.getLogger("ackqueue")
_log.setLevel(logging.DEBUG)
_log.addHandler(Conflicts())
_log.propagate = False
"""


@contextlib.contextmanager
def tmpdir(base: str | None = None) -> Iterator[str]:
    """A scratch directory, in ``base`` (a tmpfs, a disk) or the system's default, removed after."""
    d = tempfile.mkdtemp(prefix="ackqueue-bench-", dir=base)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_us(n: int, fn: Callable[[], object]) -> float:
    """Process CPU time (all threads) ``fn`` took, in microseconds per item of ``n``."""
    start = time.process_time()
    fn()
    return (time.process_time() - start) / n * 1e6


def median(values: list[float]) -> float:
    return statistics.median(values)


def dir_bytes(path: str) -> int:
    total = 0
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            total += os.path.getsize(full)
    return total


def machine() -> str:
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu_model()}), "
        f"Python {platform.python_version()}"
    )


def header(title: str) -> None:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python3 " + " ".join(sys.argv)
    print(f"{title}\n  date: {now}\n  machine: {machine()}\n  command: {command}")


def rst_table(rows: list[list[str]], head: list[str]) -> str:
    """A reStructuredText simple table."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)), rule]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(rule)
    return "\n".join(lines)


TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # what the benchmarks measure


def start_together(argvs: list[list[str]], env: dict[str, str]) -> tuple[float, list[Any]]:
    """Run one process per argv; once each has printed ``ready``, send all of them ``go``.

    Returns the time of the go and the JSON line each printed last, in argv order. They run
    in the tree the benchmarks sit in: ``python -c`` puts the working directory first on
    ``sys.path``, so run from another checkout they would import that one's ackqueue."""
    procs = [subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=TREE) for argv in argvs]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go = time.time()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        assert p.stdout is not None
        results.append(json.loads(p.stdout.readline()))
        p.wait()
    return go, results


# The end of a child script (after it opened ``q`` and set ``rounds``) that reports how long a
# get blocked in it took to wake after another process put ``time.time()``: one line "ready"
# before each get, then the seconds.
WAKER_LOOP = r"""
import time
c = q.connect()
for _ in range(rounds):
    print("ready", flush=True)
    item = c.get(timeout=30)
    print(time.time() - item, flush=True)
    c.ack(item)
c.close()
q.close()
"""
