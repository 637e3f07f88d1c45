"""Jobs per second of a worker pool burning down a backlog: ackqueue's WorkerPool beside a
hand-written pool over persist-queue's SQLiteAckQueue and one over ``queue.Queue``.

Each pool has ``--threads`` threads and a handler that does nothing (``noop``) or sleeps 1 ms
(``sleep1ms``, I/O-like). ackqueue's jobs count once their ack is durable (fsync); the
persist-queue pool acks each job itself (one SQLite commit each, WAL). The backlog is put
before the clock starts. ``ideal`` is ``threads`` threads that only sleep 1 ms in a loop: the
most any pool can reach with the 1 ms handler on this machine (sleep overshoots).

Filling persist-queue takes one commit per item (it has no batch put), so its backlog is
``--pq-n`` items (default: n, at most 20,000). Its rate does depend on the backlog (here it was
higher at 1,000 items than at 10,000), so always say which n each figure used.

Run: ``python3 benchmarks/bench_pool.py [--n 100000] [--pq-n 20000] [--threads 8] [--runs 3]``
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
import persistqueue

import ackqueue
from ackqueue.cli.bench import fill as fill_ackqueue

Handler = Callable[[Any], object]
HANDLERS: dict[str, Handler] = {
    "noop": lambda job: None,
    "sleep1ms": lambda job: time.sleep(0.001),
}


def quiet(line: str) -> None:
    pass


def ackqueue_pool(d: str, n: int, threads: int, handler: Handler) -> float:
    """Jobs/s of ackqueue's WorkerPool draining ``n`` items."""
    q = ackqueue.AckQueue(os.path.join(d, "q.fs"))
    try:
        fill_ackqueue(q, n, quiet)
        pool = ackqueue.WorkerPool(q, handler, threads=threads, log_interval=3600)
        start = time.perf_counter()
        stats = pool.run_until_empty()
        elapsed = time.perf_counter() - start
        assert stats.done == n, stats
        return n / elapsed
    finally:
        q.close()


def _hand_pool(n: int, threads: int, take: Callable[[], Any], settle: Callable[[Any], object],
               handler: Handler, empty: type[BaseException]) -> float:
    """Jobs/s of ``threads`` threads that take, handle and settle until ``n`` are done."""
    done = [0]
    lock = threading.Lock()
    finished = threading.Event()

    def work() -> None:
        while not finished.is_set():
            try:
                job = take()
            except empty:
                continue
            handler(job)
            settle(job)
            with lock:
                done[0] += 1
                if done[0] == n:
                    finished.set()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    finished.wait()
    elapsed = time.perf_counter() - start
    for w in workers:
        w.join()
    return n / elapsed


def persistqueue_pool(d: str, n: int, threads: int, handler: Handler) -> float:
    """Jobs/s of a hand-written pool over SQLiteAckQueue: get, handle, ack (one commit)."""
    q = persistqueue.SQLiteAckQueue(os.path.join(d, "pq"), multithreading=True)
    for i in range(n):
        q.put(c.item(i))
    return _hand_pool(n, threads, lambda: q.get(timeout=0.05), q.ack, handler,
                      persistqueue.Empty)


def stdlib_pool(d: str, n: int, threads: int, handler: Handler) -> float:
    """Jobs/s of a hand-written pool over queue.Queue (in memory, nothing durable)."""
    q: queue.Queue[bytes] = queue.Queue()
    for i in range(n):
        q.put(c.item(i))
    return _hand_pool(n, threads, lambda: q.get(timeout=0.05), lambda job: q.task_done(),
                      handler, queue.Empty)


def ideal_sleep(d: str, n: int, threads: int, handler: Handler) -> float:
    """``threads`` threads that sleep 1 ms ``n / threads`` times each: the 1 ms ceiling."""
    per = max(1, n // threads)

    def loop() -> None:
        for _ in range(per):
            time.sleep(0.001)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return per * threads / (time.perf_counter() - start)


POOLS = {
    "ackqueue": ackqueue_pool,
    "persist-queue": persistqueue_pool,
    "queue.Queue": stdlib_pool,
}


def measure(handler: str, n: int, pq_n: int, threads: int, runs: int,
            pools: dict[str, Any] | None = None) -> dict[str, list[float]]:
    """Jobs/s of each pool in each run, pools interleaved (rotated) within each run."""
    chosen = dict(pools or POOLS)
    if handler == "sleep1ms":
        chosen["ideal"] = ideal_sleep
    samples: dict[str, list[float]] = {name: [] for name in chosen}
    names = list(chosen)
    for r in range(runs):
        for name in names[r % len(names):] + names[: r % len(names)]:
            size = pq_n if name == "persist-queue" else n
            with c.tmpdir() as d:
                os.sync()
                samples[name].append(chosen[name](d, size, threads, HANDLERS[handler]))
    return samples


def ratio(samples: dict[str, list[float]], ours: str, other: str) -> float:
    """Median over runs of ours/other within the same run."""
    return c.median([a / b for a, b in zip(samples[ours], samples[other], strict=True)])


def report(handler: str, samples: dict[str, list[float]], n: int, pq_n: int,
           threads: int) -> list[list[str]]:
    """Print every run and return table rows: pool, median jobs/s, ackqueue's ratio to it."""
    print(f"  pool burn-down, {threads} threads, handler {handler}:")
    rows = []
    for name, values in samples.items():
        size = pq_n if name == "persist-queue" else n
        runs_text = " ".join(f"{v:,.0f}" for v in values)
        r = "" if name == "ackqueue" else f"{ratio(samples, 'ackqueue', name):.2f}x"
        print(f"    {name:<14} n={size:<9,} median {c.median(values):>9,.0f} jobs/s   "
              f"ackqueue/it {r or '-':>7}   runs: {runs_text}")
        rows.append([f"pool {handler} ({threads} threads)", name, f"{size:,}",
                     f"{c.median(values):,.0f}", r])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--pq-n", type=int, default=None)
    ap.add_argument("--sleep-n", type=int, default=None,
                    help="items for the 1 ms handler (default: n, at most 40,000)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    pq_n = args.pq_n or min(args.n, 20_000)
    sleep_n = args.sleep_n or min(args.n, 40_000)
    c.header(f"worker pools (jobs/s, median of {args.runs} runs)")
    rows = report("noop", measure("noop", args.n, pq_n, args.threads, args.runs),
                  args.n, pq_n, args.threads)
    rows += report("sleep1ms", measure("sleep1ms", sleep_n, min(pq_n, sleep_n), args.threads,
                                       args.runs), sleep_n, min(pq_n, sleep_n), args.threads)
    print()
    print(c.rst_table(rows, ["scenario", "pool", "n", "jobs/s", "ackqueue ratio"]))


if __name__ == "__main__":
    main()
