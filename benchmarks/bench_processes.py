"""What worker processes buy a CPU-bound handler: ``ProcessPool`` with 1 and 2 processes beside
a ``WorkerPool`` of 2 threads in one process (the GIL lets one run at a time), on one queue
file opened with ``shared=True``, in one run (the machine is shared: read the ratios).

    python benchmarks/bench_processes.py [--items 300] [--work 20000] [--rounds 3]

The handler hashes a short string ``--work`` times with SHA-256 in pure Python calls (about
10 ms an item here), then the pool acks the item. A run drains a queue of ``--items`` items with
``run_until_empty()``; its wall time includes starting the processes and the end-of-run check
(measured apart, on an empty queue: "fixed cost"), so both figures are printed: items/s over the
whole run, and over the run less the fixed cost.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from typing import Any

import _common

import ackqueue


def burn(item: dict[str, Any]) -> None:
    digest = str(item["n"]).encode()
    for _ in range(item["work"]):
        digest = hashlib.sha256(digest).digest()


def drain(path: str, items: int, work: int, processes: int | None) -> float:
    """Seconds to drain ``items`` items: with ``processes`` worker processes, or (None) with a
    WorkerPool of two threads in this process."""
    with ackqueue.AckQueue(path, shared=True) as q:
        q.put_many([{"n": n, "work": work} for n in range(items)])
    started = time.perf_counter()
    if processes is None:
        with ackqueue.AckQueue(path, shared=True) as q:
            stats = ackqueue.WorkerPool(q, burn, threads=2).run_until_empty()
    else:
        stats = ackqueue.ProcessPool(path, burn, processes=processes).run_until_empty()
    seconds = time.perf_counter() - started
    assert stats.done >= items, f"{stats.done} of {items} done"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--work", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kinds: list[tuple[str, int | None]] = [("WorkerPool, 2 threads", None),
                                           ("ProcessPool, 1 process", 1),
                                           ("ProcessPool, 2 processes", 2)]
    walls: dict[str, list[float]] = {}
    fixed: dict[str, list[float]] = {}
    os.environ.setdefault("ACKQUEUE_SERVER_IDLE", "2")
    for _ in range(args.rounds):
        for label, processes in kinds:
            with _common.tmpdir() as tmp:
                path = os.path.join(tmp, "q.fs")
                fixed.setdefault(label, []).append(drain(path, 0, args.work, processes))
                walls.setdefault(label, []).append(drain(path, args.items, args.work,
                                                         processes))
            print(f"  {label:26} {args.items / walls[label][-1]:6.1f} items/s "
                  f"(fixed cost {fixed[label][-1]:.2f} s)", flush=True)
    print(f"\nmedians of {args.rounds} rounds, {args.items} items, {args.work} hashes an item")
    print("| pool | items/s | items/s less the fixed cost | fixed cost, s | ratio to 1 process |")
    print("|---|---:|---:|---:|---:|")
    one = None
    for label, processes in kinds:
        wall, cost = _common.median(walls[label]), _common.median(fixed[label])
        net = args.items / max(1e-9, wall - cost)
        if processes == 1:
            one = net
        ratio = f"{net / one:.2f}" if one else ""
        print(f"| {label} | {args.items / wall:.1f} | {net:.1f} | {cost:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
