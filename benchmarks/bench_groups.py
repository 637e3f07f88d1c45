"""What groups cost, and whether their rules hold under load (issue 12).

    python benchmarks/bench_groups.py [--groups 1000] [--per-group 100] [--threads 32]
                                      [--runs 1] [--interval 0.05]

A backlog of ``--groups`` x ``--per-group`` items is drained by ``--threads`` consumer
threads, each getting and acking one item at a time (every ack a durable commit; concurrent
acks share one by group commit). Two put orders: *group-major* (all of one group, then the
next: the order in which a big group would starve the others without round-robin) and
*interleaved* (one item of each group, round after round, as a crawler finds links to many
hosts). In one run, on fresh files:

* ``plain``: the same items put without a group (the reference), in each order;
* ``groups``: put with ``group=``, no rules: items/s and the ratio to ``plain`` of the same
  order (target: within 10 %). Round-robin hands out group-major items far apart in the
  stored tree, so concurrent acks rewrite many tree buckets per commit instead of one or two:
  that, not the grouped index, is what costs there (interleaved puts show it);
* ``max_held_per_group=1``: the most items of one group the workers held at once, counted by
  the workers between their get and their ack (must be 1);
* ``group_interval``: the least time between two deliveries of one group. A delivery's time
  is read where the queue takes it: the first reading of the queue's clock in the getting
  thread, which is the grouped index stamping the group's next allowed time (must be >= the
  interval). Its drain takes at least ``per-group x interval`` seconds by design.

Prints items/s for each, the ratio, the two checks, and the medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import threading
import time
from collections import Counter
from typing import Any

import _common  # noqa: F401 - puts the tree this script sits in first on sys.path

from ackqueue import AckQueue, Empty

ORDERS = ("group-major", "interleaved")


class StampingClock:
    """``time.time``, remembering per thread the first reading since :meth:`arm`."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> float:
        now = time.time()
        if getattr(self._local, "armed", False):
            self._local.armed = False
            self._local.stamp = now
        return now

    def arm(self) -> None:
        self._local.armed = True
        self._local.stamp = None

    def stamp(self) -> float | None:
        return getattr(self._local, "stamp", None)


def fill(q: AckQueue[Any], groups: int, per_group: int, grouped: bool, order: str) -> None:
    payload = b"x" * 100
    if order == "group-major":  # all of one group, then the next
        for g in range(groups):
            batch = [(g, i, payload) for i in range(per_group)]
            q.put_many(batch, group=f"host{g}" if grouped else None)
        return
    for i in range(per_group):  # interleaved: one item of each group, round after round
        with q.transaction():
            for g in range(groups):
                q.put((g, i, payload), group=f"host{g}" if grouped else None)


def drain(
    path: str,
    groups: int,
    per_group: int,
    threads: int,
    grouped: bool,
    order: str = "interleaved",
    **options: Any,
) -> dict[str, float]:
    clock = StampingClock()
    q = AckQueue(path, clock=clock, **options)
    try:
        fill(q, groups, per_group, grouped, order)
        lock = threading.Lock()
        out: Counter[int] = Counter()
        most_out = 0
        stamps: dict[int, list[float]] = {}
        done = [0]
        finished = [0.0]
        total = groups * per_group

        def work() -> None:
            nonlocal most_out
            with q.connect() as c:
                while True:
                    clock.arm()
                    try:
                        item = c.get(timeout=2.0)
                    except Empty:
                        return
                    stamp = clock.stamp()
                    g = item[0]
                    with lock:
                        out[g] += 1
                        most_out = max(most_out, out[g])
                        if stamp is not None and "group_interval" in options:
                            stamps.setdefault(g, []).append(stamp)
                    with lock:
                        out[g] -= 1  # before the ack: after it, the group may deliver again
                    c.ack(item)
                    with lock:
                        done[0] += 1
                        if done[0] == total:
                            finished[0] = time.perf_counter()

        workers = [threading.Thread(target=work) for _ in range(threads)]
        began = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = finished[0] - began
        assert done[0] == total and q.qsize() == 0 and q.unacked_count() == 0, done
        gaps = [
            later - earlier
            for series in stamps.values()
            for earlier, later in itertools.pairwise(sorted(series))
        ]
        return {
            "items/s": total / elapsed,
            "most held of one group": float(most_out),
            "least gap s": min(gaps) if gaps else float("nan"),
        }
    finally:
        q.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--per-group", type=int, default=100)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    shape = (args.groups, args.per_group, args.threads)
    cases: dict[str, dict[str, Any]] = {
        "plain, group-major": dict(grouped=False, order="group-major"),
        "groups, group-major": dict(grouped=True, order="group-major"),
        "plain, interleaved": dict(grouped=False),
        "groups, interleaved": dict(grouped=True),
        "max_held_per_group=1": dict(grouped=True, max_held_per_group=1),
        f"group_interval={args.interval}": dict(grouped=True, group_interval=args.interval),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    ratios: dict[str, list[float]] = {order: [] for order in ORDERS}
    print(f"{args.groups} groups x {args.per_group} items, {args.threads} threads, "
          f"{args.runs} run(s)")
    for run in range(args.runs):
        for name, options in cases.items():
            with _common.tmpdir() as tmp:
                figures = drain(os.path.join(tmp, "q.fs"), *shape, **options)
            results[name].append(figures)
            print(f"  run {run + 1} {name:>26}: " + ", ".join(
                f"{k} {v:,.4g}" for k, v in figures.items()))
        for order in ORDERS:
            grouped, plain = results[f"groups, {order}"][-1], results[f"plain, {order}"][-1]
            ratios[order].append(grouped["items/s"] / plain["items/s"])
    print("medians:")
    for name, runs in results.items():
        rate = statistics.median(r["items/s"] for r in runs)
        print(f"  {name:>26}: {rate:,.0f} items/s")
    for order, of_order in ratios.items():
        print(f"groups / plain, {order}, items/s (same run): "
              f"{', '.join(f'{r:.3f}' for r in of_order)} "
              f"(median {statistics.median(of_order):.3f}; target >= 0.90)")
    most = max(r["most held of one group"] for r in results["max_held_per_group=1"])
    print(f"max_held_per_group=1: most held of one group at once: {most:.0f} (must be 1)")
    gap = min(r["least gap s"] for r in results[f"group_interval={args.interval}"])
    print(f"group_interval={args.interval}: least gap between two deliveries of one group: "
          f"{gap:.4f} s (must be >= {args.interval})")


if __name__ == "__main__":
    main()
