"""Disk, memory, counter and reopen footprint of ackqueue.

- ``churn``: 50,000 put/get/ack cycles with 100 items always queued, automatic packing on,
  no user action: the storage files' total size at the end and at its largest.
- ``bytes/cycle``: bytes appended to the file per put/get/ack cycle (packing off) with 100 and
  with 10,000 items queued.
- ``million``: 1,000,000 queued 100-byte items: the time and RSS to put them (``put_many`` when
  the queue has it, else the records a million puts leave are written in 10,000-item commits),
  ``qsize()``/``unacked_count()``/``empty()``/``full()`` per call, then ``kill -9``; a new
  process reopens the file: time to open and to get the first item, RSS, counters again.

- ``grouped``: 100,000 items put with groups (1,000 of them), ``kill -9``, and a new process
  reopens the file: the time to open and to get the first item (the open reads every grouped
  entry).

Run: ``python3 benchmarks/bench_footprint.py [--cycles 50000] [--million 1000000]
[--grouped 100000]``.
``--durability relaxed`` (the default here) only makes the churn faster; disk use is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from typing import Any

import _common as c

import ackqueue

HERE = os.path.dirname(os.path.abspath(__file__))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def counter_us(q: Any) -> dict[str, float]:
    """Median microseconds per call of each O(1) counter."""
    out = {}
    for name in ("qsize", "unacked_count", "empty", "full"):
        fn = getattr(q, name)
        times = []
        for _ in range(1000):
            t = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t)
        out[name] = c.median([float(x) for x in times]) / 1000
    return out


def fill(q: ackqueue.AckQueue, n: int) -> str:
    """Put n items as fast as the queue allows (1,000 a commit); returns how."""
    for s in range(0, n, 1000):
        q.put_many([c.item(i) for i in range(s, min(n, s + 1000))])
    return "put_many"


# -- churn and bytes per cycle -----------------------------------------------------------


def churn(cycles: int, depth: int, durability: str) -> dict[str, Any]:
    with c.tmpdir() as d:
        q = ackqueue.AckQueue(os.path.join(d, "q.fs"), durability=durability)
        for i in range(depth):
            q.put(c.item(i))
        cons = q.connect()
        largest = 0
        start = time.perf_counter()
        for i in range(cycles):
            q.put(c.item(depth + i))
            cons.ack(cons.get())
            if i % 250 == 0:
                largest = max(largest, c.dir_bytes(d))
        elapsed = time.perf_counter() - start
        end = c.dir_bytes(d)
        packer = q._store.packer
        packs = packer.packs if packer is not None else 0
        q.close()
        return {
            "cycles": cycles,
            "depth": depth,
            "seconds": elapsed,
            "end_bytes": end,
            "largest_bytes": max(largest, end),
            "packs": packs,
        }


def bytes_per_cycle(depth: int, cycles: int) -> float:
    with c.tmpdir() as d:
        path = os.path.join(d, "q.fs")
        q = ackqueue.AckQueue(path, durability="relaxed", autopack=False)
        how = fill(q, depth)
        if how == "direct":
            q.close()
            q = ackqueue.AckQueue(path, durability="relaxed", autopack=False)
        cons = q.connect()
        for i in range(200):  # warm up: reach the steady state of the tree's edges
            q.put(c.item(i))
            cons.ack(cons.get())
        before = os.path.getsize(path)
        for i in range(cycles):
            q.put(c.item(i))
            cons.ack(cons.get())
        after = os.path.getsize(path)
        q.close()
        return (after - before) / cycles


# -- a million items, in child processes -------------------------------------------------


def child_fill(path: str, n: int) -> None:
    q = ackqueue.AckQueue(path)
    start = time.perf_counter()
    how = fill(q, n)
    took = time.perf_counter() - start
    cons = q.connect()
    held = [cons.get() for _ in range(100)] if how == "put_many" else []
    report = {
        "how": how,
        "fill_seconds": took,
        "rss_mb": c.rss_mb(),
        "peak_rss_mb": peak_rss_mb(),
        "counters_us": counter_us(q),
        "qsize": q.qsize(),
        "unacked": q.unacked_count(),
        "held": len(held),
        "file_mb": os.path.getsize(path) / 1e6,
    }
    print(json.dumps(report), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def child_fill_grouped(path: str, n: int) -> None:
    """``n`` items in 1,000 groups (``put(group=)``), 1,000 a transaction, then kill -9."""
    q = ackqueue.AckQueue(path)
    for lo in range(0, n, 1000):
        with q.transaction():
            for i in range(lo, min(n, lo + 1000)):
                q.put(c.item(i), group=f"host{i % 1000}")
    print(json.dumps({"grouped": n}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def child_reopen(path: str) -> None:
    start = time.perf_counter()
    q = ackqueue.AckQueue(path)
    opened = time.perf_counter() - start
    cons = q.connect()
    first = cons.get()
    first_at = time.perf_counter() - start
    cons.ack(first)
    held = [cons.get() for _ in range(100)]
    report = {
        "open_seconds": opened,
        "first_get_seconds": first_at,
        "rss_mb": c.rss_mb(),
        "peak_rss_mb": peak_rss_mb(),
        "counters_us": counter_us(q),
        "qsize": q.qsize(),
        "unacked": q.unacked_count(),
        "held": len(held),
    }
    print(json.dumps(report), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def run_child(*args: str) -> dict[str, Any]:
    env = dict(os.environ)
    root = os.path.dirname(HERE)
    env["PYTHONPATH"] = os.pathsep.join([HERE, root, env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"child {args} ended with {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def million(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    with c.tmpdir() as d:
        path = os.path.join(d, "q.fs")
        filled = run_child("--child-fill", path, str(n))
        reopened = run_child("--child-reopen", path)
        return filled, reopened


def grouped(n: int) -> dict[str, Any]:
    """Reopening ``n`` grouped items after kill -9: the open reads every grouped entry (the
    ready index must know each one's group)."""
    with c.tmpdir() as d:
        path = os.path.join(d, "q.fs")
        run_child("--child-fill-grouped", path, str(n))
        return run_child("--child-reopen", path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=50_000)
    ap.add_argument("--million", type=int, default=1_000_000)
    ap.add_argument("--grouped", type=int, default=100_000)
    ap.add_argument("--durability", default="relaxed")
    ap.add_argument("--child-fill", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--child-reopen", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument(
        "--child-fill-grouped", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child_fill:
        child_fill(args.child_fill[0], int(args.child_fill[1]))
    if args.child_fill_grouped:
        child_fill_grouped(args.child_fill_grouped[0], int(args.child_fill_grouped[1]))
    if args.child_reopen:
        child_reopen(args.child_reopen)

    c.header("ackqueue footprint")
    rows: list[list[str]] = []
    r = churn(args.cycles, 100, args.durability)
    print(f"  churn: {json.dumps(r)}")
    rows.append(
        [
            f"files after {r['cycles']:,} put/get/ack cycles, 100 queued",
            f"{r['end_bytes'] / 1e6:.2f} MB (largest {r['largest_bytes'] / 1e6:.2f} MB, "
            f"{r['packs']} automatic packs)",
        ]
    )
    for depth in (100, 10_000):
        b = bytes_per_cycle(depth, 2000)
        print(f"  bytes appended per put/get/ack cycle at {depth} queued: {b:,.0f}")
        rows.append([f"bytes appended per cycle, {depth:,} queued", f"{b:,.0f} B"])
    filled, reopened = million(args.million)
    print(f"  fill: {json.dumps(filled)}")
    print(f"  reopen after kill -9: {json.dumps(reopened)}")
    n = args.million
    rows.append(
        [
            f"put {n:,} items ({filled['how']})",
            f"{filled['fill_seconds']:.1f} s, RSS {filled['rss_mb']:.0f} MB "
            f"(peak {filled['peak_rss_mb']:.0f} MB), file {filled['file_mb']:.0f} MB",
        ]
    )
    worst = max(max(filled["counters_us"].values()), max(reopened["counters_us"].values()))
    rows.append([f"qsize/unacked_count/empty/full, {n:,} queued", f"≤ {worst:.1f} µs a call"])
    rows.append(
        [
            f"reopen after kill -9, {n:,} queued",
            f"{reopened['open_seconds']:.2f} s (first item at "
            f"{reopened['first_get_seconds']:.2f} s), RSS {reopened['rss_mb']:.0f} MB",
        ]
    )
    regrouped = grouped(args.grouped)
    print(f"  reopen of grouped items after kill -9: {json.dumps(regrouped)}")
    rows.append(
        [
            f"reopen after kill -9, {args.grouped:,} grouped items (1,000 groups)",
            f"{regrouped['open_seconds']:.2f} s (first item at "
            f"{regrouped['first_get_seconds']:.2f} s), RSS {regrouped['rss_mb']:.0f} MB",
        ]
    )
    print()
    print(c.rst_table(rows, ["measurement", "figure"]))


if __name__ == "__main__":
    main()
