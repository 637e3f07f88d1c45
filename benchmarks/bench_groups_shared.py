"""Groups across processes (``shared=True``): what the per-group cap costs, and how often the
commits that enforce it conflict.

    python benchmarks/bench_groups_shared.py [--groups 50] [--per-group 20] [--processes 3]
                                             [--threads 4]

``--processes`` worker processes with ``--threads`` consumer threads each drain a backlog put
beforehand (interleaved: one item of each group, round after round), each thread getting and
acking one item at a time. In one run, on fresh files: items put without a group, with groups
and no rules, and with ``max_held_per_group=1``. Prints items/s, the ratio to the ungrouped
run, and the write conflicts retried per item (counted from the ``ackqueue`` logger): a take
of a grouped item writes its group's last-delivery time, so two processes taking items of one
group at once conflict and one retries (see ``ackqueue/shared/groupgate.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

import _common

from ackqueue import AckQueue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = _common.COUNT_CONFLICTS + r"""
import json, sys, threading, time
import ackqueue
path, threads, cap = sys.argv[1], int(sys.argv[2]), sys.argv[3]
q = ackqueue.AckQueue(path, shared=True, max_held_per_group=None if cap == "-" else int(cap))
print("ready", flush=True)
sys.stdin.readline()
done = [0] * threads
last = [0.0] * threads

def work(n):
    with q.connect() as c:
        while True:
            try:
                item = c.get(timeout=2.0)
            except ackqueue.Empty:
                return
            c.ack(item)
            done[n] += 1
            last[n] = time.time()

ts = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps({"done": sum(done), "last": max(last), "conflicts": Conflicts.count}), flush=True)
q.close()
"""


def one_case(
    path: str, groups: int, per_group: int, processes: int, threads: int, grouped: bool,
    cap: int | None,
) -> dict[str, float]:
    with AckQueue(path, shared=True) as q:  # started here, kept by the workers' server use
        for i in range(per_group):
            with q.transaction():
                for g in range(groups):
                    q.put((g, i), group=f"host{g}" if grouped else None)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    argv = [sys.executable, "-c", WORKER, path, str(threads), "-" if cap is None else str(cap)]
    go, results = _common.start_together([argv] * processes, env)
    done = sum(r["done"] for r in results)
    total = groups * per_group
    assert done == total, f"consumed {done} of {total}"
    seconds = max(r["last"] for r in results) - go
    return {"items/s": done / seconds, "conflicts/item": sum(r["conflicts"] for r in results)
            / done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--per-group", type=int, default=20)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    shape = (args.groups, args.per_group, args.processes, args.threads)
    print(f"{args.groups} groups x {args.per_group} items, {args.processes} processes x "
          f"{args.threads} threads, shared=True")
    cases = {"plain": (False, None), "groups": (True, None), "max_held_per_group=1": (True, 1)}
    figures = {}
    for name, (grouped, cap) in cases.items():
        with _common.tmpdir() as tmp:
            figures[name] = one_case(os.path.join(tmp, "q.fs"), *shape, grouped, cap)
        f = figures[name]
        print(f"  {name:>22}: {f['items/s']:,.0f} items/s, {f['conflicts/item']:.3f} "
              "conflicts retried per item")
    for name in ("groups", "max_held_per_group=1"):
        ratio = figures[name]["items/s"] / figures["plain"]["items/s"]
        print(f"{name} / plain, items/s (same run): {ratio:.3f}")


if __name__ == "__main__":
    main()
