"""Throughput of ackqueue beside persist-queue, queue.Queue and a bare FileStorage loop.

Every implementation gets the same 100-byte items in the same run; each scenario is repeated
``--runs`` times (implementations interleaved, so that noise from the shared machine falls on
all of them alike) and the median is printed, with ackqueue's ratio to each other figure.

Scenarios (items per second; every put and ack durable when it returns unless said):

- ``put``: one thread puts N items.
- ``get+ack``: one thread gets and acks N items put earlier (queue reopened from disk).
- ``4P/4C``: 4 producer threads put N items while 4 consumer threads get and ack them;
  time from the first put to the last ack.
- ``relaxed put``: ``AckQueue(path, durability="relaxed")`` (survives kill -9, may lose the
  last second on power loss).
- ``put_many`` / ``get_many`` / ``ack_many`` at 100 items a call.
- ``pool``: a worker pool of 8 threads burning down a backlog, handler doing nothing or
  sleeping 1 ms: ackqueue's ``WorkerPool`` beside a hand-written pool over persist-queue
  (``bench_pool.py``; ``--pool-n`` items, persist-queue ``--pq-pool-n``).
- latency under the 4P/4C load: p50 and p99 from ``put`` returning to the blocked ``get``
  returning it, and from that ``get`` to a durable ``ack``.

Run: ``python3 benchmarks/bench_throughput.py [--n 2000] [--runs 3] [--pool-n 100000]``
(needs ``[bench]``: persist-queue). Prints a reStructuredText table at the end.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import _common as c
import bench_pool
import persistqueue
import transaction
import ZODB
from BTrees.LOBTree import LOBTree
from ZODB.FileStorage import FileStorage

import ackqueue
from ackqueue.cli.bench import Latencies, ackqueue_latency, measure_latency, percentile

Scenario = Callable[[str, int], float]  # (tmp dir, n) -> seconds


# -- opening each implementation --------------------------------------------------------------


def open_ack(d: str, **options: Any) -> ackqueue.AckQueue:
    return ackqueue.AckQueue(os.path.join(d, "q.fs"), **options)


def open_pq(d: str) -> Any:
    return persistqueue.SQLiteAckQueue(os.path.join(d, "pq"), multithreading=True)


# -- put, one thread ----------------------------------------------------------------------------


def put_ack(d: str, n: int, **options: Any) -> float:
    q = open_ack(d, **options)
    items = [c.item(i) for i in range(n)]
    try:
        return c.timed(lambda: [q.put(x) for x in items])
    finally:
        q.close()


def put_pq(d: str, n: int) -> float:
    q = open_pq(d)
    items = [c.item(i) for i in range(n)]
    return c.timed(lambda: [q.put(x) for x in items])


def put_stdlib(d: str, n: int) -> float:
    q: queue.Queue[bytes] = queue.Queue()
    items = [c.item(i) for i in range(n)]
    return c.timed(lambda: [q.put(x) for x in items])


def put_bare_zodb(d: str, n: int) -> float:
    """The floor: one item into a BTree and one FileStorage commit (one fsync) per item."""
    db = ZODB.DB(FileStorage(os.path.join(d, "bare.fs")))
    tm = transaction.TransactionManager()
    conn = db.open(transaction_manager=tm)
    conn.root()["t"] = tree = LOBTree()
    tm.commit()
    items = [c.item(i) for i in range(n)]

    def loop() -> None:
        for i, x in enumerate(items):
            tree[i] = x
            tm.commit()

    try:
        return c.timed(loop)
    finally:
        conn.close()
        db.close()


# -- get + ack, one thread -----------------------------------------------------------------


def prefill_ack(d: str, n: int) -> None:
    q = open_ack(d)
    try:
        for start in range(0, n, 100):
            q.put_many([c.item(i) for i in range(start, min(n, start + 100))])
    finally:
        q.close()


def getack_ack(d: str, n: int) -> float:
    prefill_ack(d, n)
    q = open_ack(d)
    cons = q.connect()

    def loop() -> None:
        for _ in range(n):
            cons.ack(cons.get())

    try:
        return c.timed(loop)
    finally:
        q.close()


def getack_pq(d: str, n: int) -> float:
    q = open_pq(d)
    for i in range(n):
        q.put(c.item(i))
    del q
    q = open_pq(d)

    def loop() -> None:
        for _ in range(n):
            q.ack(q.get())

    return c.timed(loop)


def getack_stdlib(d: str, n: int) -> float:
    q: queue.Queue[bytes] = queue.Queue()
    for i in range(n):
        q.put(c.item(i))

    def loop() -> None:
        for _ in range(n):
            q.get()
            q.task_done()

    return c.timed(loop)


# -- 4 producers + 4 consumers --------------------------------------------------------------


def _producers_consumers(
    n: int, put: Callable[[bytes], Any], make_consumer: Callable[[], Callable[[], bool]]
) -> float:
    """Seconds from start until the n-th item is acked. ``make_consumer`` runs in each consumer
    thread and returns a step function: get one item (with a short timeout) and ack it,
    returning False on timeout."""
    done = threading.Event()
    count = [0]
    lock = threading.Lock()
    end = [0.0]

    def produce(k: int) -> None:
        for i in range(k, n, 4):
            put(c.item(i))

    def consume() -> None:
        step = make_consumer()
        while not done.is_set():
            if step():
                with lock:
                    count[0] += 1
                    if count[0] == n:
                        end[0] = time.perf_counter()
                        done.set()

    threads = [threading.Thread(target=consume) for _ in range(4)]
    threads += [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return end[0] - start


def mt_ack(d: str, n: int) -> float:
    q = open_ack(d)

    def consumer() -> Callable[[], bool]:
        cons = q.connect()

        def step() -> bool:
            try:
                x = cons.get(timeout=0.05)
            except queue.Empty:
                return False
            cons.ack(x)
            return True

        return step

    try:
        return _producers_consumers(n, q.put, consumer)
    finally:
        q.close()


def mt_pq(d: str, n: int) -> float:
    q = open_pq(d)

    def consumer() -> Callable[[], bool]:
        def step() -> bool:
            try:
                x = q.get(timeout=0.05)
            except persistqueue.Empty:
                return False
            q.ack(x)
            return True

        return step

    return _producers_consumers(n, q.put, consumer)


def mt_stdlib(d: str, n: int) -> float:
    q: queue.Queue[bytes] = queue.Queue()

    def consumer() -> Callable[[], bool]:
        def step() -> bool:
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                return False
            q.task_done()
            return True

        return step

    return _producers_consumers(n, q.put, consumer)


# -- batches -------------------------------------------------------


def batches_ack(d: str, n: int) -> tuple[float, float, float]:
    q = open_ack(d)
    chunks = [[c.item(i) for i in range(s, min(n, s + 100))] for s in range(0, n, 100)]
    cons = q.connect()
    got: list[list[Any]] = []

    def get_all() -> None:
        total = 0
        while total < n:  # get_many returns between 1 and 100 items
            batch = cons.get_many(min(100, n - total))
            got.append(batch)
            total += len(batch)

    try:
        t_put = c.timed(lambda: [q.put_many(ch) for ch in chunks])
        t_get = c.timed(get_all)
        t_ack = c.timed(lambda: [cons.ack_many(g) for g in got])
        return t_put, t_get, t_ack
    finally:
        q.close()


# -- latency under 4P/4C -----------------------------------------------------------------------


def latency_pq(d: str, n: int) -> Latencies:
    q = open_pq(d)

    def consumer() -> tuple[Callable[[float], Any], Callable[[Any], object]]:
        return (lambda timeout: q.get(timeout=timeout)), q.ack

    return measure_latency(n, q.put, consumer, empty=(persistqueue.Empty,))


def latency_rows(n: int, runs: int) -> list[list[str]]:
    """p50/p99 latencies (ms), medians over runs, for ackqueue and persist-queue."""
    openers: dict[str, Callable[[str, int], Latencies]] = {
        "ackqueue": lambda d, k: ackqueue_latency(os.path.join(d, "q.fs"), k),
        "persist-queue": latency_pq,
    }
    figures: dict[tuple[str, str, int], list[float]] = {}
    for r in range(runs):
        for name in list(openers)[r % 2 :] + list(openers)[: r % 2]:
            with c.tmpdir() as d:
                os.sync()
                lat = openers[name](d, n)
            for what, values in (("put->get", lat.put_to_get), ("get->ack", lat.get_to_ack)):
                for p in (50, 99):
                    figures.setdefault((name, what, p), []).append(percentile(values, p) * 1e3)
    rows = []
    print(f"  latency under 4P/4C (ms, median of {runs} runs, n={n}):")
    for what in ("put->get", "get->ack"):
        for p in (50, 99):
            ours = c.median(figures["ackqueue", what, p])
            theirs = c.median(figures["persist-queue", what, p])
            print(f"    {what} p{p}: ackqueue {ours:.2f} ms, persist-queue {theirs:.2f} ms "
                  f"(persist-queue/ackqueue {theirs / ours:.2f}x)")
            rows.append([f"latency {what} p{p} (ms)", f"{ours:.2f}", f"{theirs:.2f}",
                         f"{theirs / ours:.2f}x", "", "", ""])
    return rows


# -- running -------------------------------------------------------------------------------


Samples = dict[str, list[float]]


def measure(scenarios: dict[str, Scenario], n: int, runs: int) -> Samples:
    """Items/s of each scenario in each run, implementations interleaved within each run."""
    samples: Samples = {name: [] for name in scenarios}
    names = list(scenarios)
    for r in range(runs):
        # Rotate the order, and let the disk settle (writeback of what an earlier scenario
        # left, its files' removal) so that no implementation always follows the same one.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with c.tmpdir() as d:
                os.sync()
                samples[name].append(n / scenarios[name](d, n))
    return samples


def paired_ratio(samples: Samples, ours: str, other: str) -> float:
    """Median over runs of ours/other within the same run: robust to load that changes
    between runs on a shared machine."""
    return c.median([a / b for a, b in zip(samples[ours], samples[other], strict=True)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="items per scenario run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pool-n", type=int, default=100_000, help="backlog of the no-op pool")
    ap.add_argument("--pq-pool-n", type=int, default=20_000,
                    help="backlog of the persist-queue pool (one commit per put to fill)")
    ap.add_argument("--sleep-pool-n", type=int, default=40_000,
                    help="backlog of the pools whose handler sleeps 1 ms")
    args = ap.parse_args()
    n, runs = args.n, args.runs
    c.header(f"ackqueue throughput (items/s, median of {runs} runs, n={n})")

    puts: dict[str, Scenario] = {
        "ackqueue": put_ack,
        "persist-queue": put_pq,
        "queue.Queue": put_stdlib,
        "bare FileStorage": put_bare_zodb,
    }
    puts["ackqueue relaxed"] = lambda d, k: put_ack(d, k, durability="relaxed")
    put_r = measure(puts, n, runs)
    getack_r = measure(
        {"ackqueue": getack_ack, "persist-queue": getack_pq, "queue.Queue": getack_stdlib},
        n,
        runs,
    )
    mt_r = measure(
        {"ackqueue": mt_ack, "persist-queue": mt_pq, "queue.Queue": mt_stdlib}, n, runs
    )

    rows: list[list[str]] = []

    def row(what: str, samples: Samples, ours: str = "ackqueue") -> None:
        def med(name: str) -> str:
            return f"{c.median(samples[name]):,.0f}" if name in samples else ""

        def ratio(name: str) -> str:
            return f"{paired_ratio(samples, ours, name):.2f}x" if name in samples else ""

        pq, bare, std = "persist-queue", "bare FileStorage", "queue.Queue"
        rows.append([what, med(ours), med(pq), ratio(pq), med(bare), ratio(bare), med(std)])
        print(f"  {what}:")
        for name, v in samples.items():
            runs_text = " ".join(f"{x:,.0f}" for x in v)
            print(f"    {name:<18} median {c.median(v):>10,.0f} items/s   runs: {runs_text}")
        for name in (pq, bare):
            if name in samples:
                print(f"    {ours} / {name}: {ratio(name)} (median of per-run ratios)")

    row("put", {k: v for k, v in put_r.items() if k != "ackqueue relaxed"})
    row("put (relaxed)", put_r, ours="ackqueue relaxed")
    row("get+ack", getack_r)
    row("4P/4C", mt_r)

    samples: list[tuple[float, float, float]] = []
    for _ in range(runs):
        with c.tmpdir() as d:
            samples.append(batches_ack(d, n))
    for i, what in enumerate(("put_many", "get_many", "ack_many")):
        v = c.median([n / s[i] for s in samples])
        print(f"  {what:<14} ackqueue (100/call) {v:>12,.0f} items/s")
        rows.append([f"{what} (100/call)", f"{v:,.0f}", "", "", "", "", ""])

    rows += latency_rows(n, runs)

    pools = {k: v for k, v in bench_pool.POOLS.items() if k != "queue.Queue"}
    pq_sleep_n = min(args.pq_pool_n, args.sleep_pool_n)
    for handler, pool_n, pq_n in (("noop", args.pool_n, args.pq_pool_n),
                                  ("sleep1ms", args.sleep_pool_n, pq_sleep_n)):
        pool_r = bench_pool.measure(handler, pool_n, pq_n, 8, runs, pools)
        bench_pool.report(handler, pool_r, pool_n, pq_n, 8)
        pq_med = c.median(pool_r["persist-queue"])
        rows.append([f"pool {handler} 8 thr, jobs/s (n {pool_n:,}/{pq_n:,})",
                     f"{c.median(pool_r['ackqueue']):,.0f}", f"{pq_med:,.0f}",
                     f"{bench_pool.ratio(pool_r, 'ackqueue', 'persist-queue'):.2f}x", "", "", ""])

    print()
    print(
        c.rst_table(
            rows,
            ["scenario", "ackqueue", "persist-queue", "ratio", "bare FileStorage", "ratio",
             "queue.Queue"],
        )
    )


if __name__ == "__main__":
    main()
