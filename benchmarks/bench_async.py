"""The asyncio front end beside the threaded API, in the same run.

Figures (medians of ``--runs`` runs, threaded and async interleaved so the shared machine's
noise falls on both alike; every ack durable when it returns):

- ``get+ack``, one consumer: one thread doing ``c.ack(c.get())`` N times, beside one task
  doing ``await c.ack(await c.get())``; and the same with 4 threads beside 4 tasks.
- pool burn-down, no-op handler: ``WorkerPool(threads=8)`` beside
  ``AsyncWorkerPool(concurrency=8)`` on a backlog of ``--pool-n`` items.
- acks from 64 tasks at once with the queue's commit threads at 1, 2 and 8: how much the
  store's group commit gains from the threads the async queue commits on.
- 10,000 tasks awaiting ``get()`` at once (each its own consumer): the RSS they add, the
  threads they hold, and the wake-up latency when a thread puts one item: from ``put()``
  being called, and from ``put()`` returning (the item is durable), to the woken task having
  it; median and p99 over ``--samples`` puts. The same for one thread blocked in ``get()``.

Run: ``python3 benchmarks/bench_async.py [--n 2000] [--pool-n 20000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import threading
import time
from typing import Any

import _common as c

import ackqueue
from ackqueue.cli.bench import fill, percentile
from ackqueue.queue.queues import ready_listeners


def prefill(path: str, n: int) -> None:
    with ackqueue.AckQueue(path) as q:
        fill(q, n, lambda line: None)


# -- get+ack ----------------------------------------------------------------------------------


def getack_threads(d: str, n: int, consumers: int) -> float:
    path = os.path.join(d, "q.fs")
    prefill(path, n)
    with ackqueue.AckQueue(path) as q:
        def consume() -> None:
            with q.connect() as cons:
                while True:
                    try:
                        cons.ack(cons.get_nowait())
                    except ackqueue.Empty:
                        return

        threads = [threading.Thread(target=consume) for _ in range(consumers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return n / (time.perf_counter() - start)


def getack_tasks(d: str, n: int, consumers: int, threads: int = 8) -> float:
    """``consumers`` tasks getting and acking; the async queue commits on ``threads``."""
    path = os.path.join(d, "q.fs")
    prefill(path, n)

    async def main() -> float:
        async with ackqueue.AsyncAckQueue(path, threads=threads) as q:
            async def consume() -> None:
                async with q.connect() as cons:
                    while True:
                        try:
                            await cons.ack(await cons.get(timeout=0))
                        except ackqueue.Empty:
                            return

            start = time.perf_counter()
            await asyncio.gather(*(consume() for _ in range(consumers)))
            return n / (time.perf_counter() - start)

    return asyncio.run(main())


# -- pool burn-down ---------------------------------------------------------------------------


def pool_threads(d: str, n: int) -> float:
    path = os.path.join(d, "q.fs")
    prefill(path, n)
    with ackqueue.AckQueue(path) as q:
        pool = ackqueue.WorkerPool(q, lambda job: None, threads=8, log_interval=3600)
        start = time.perf_counter()
        stats = pool.run_until_empty()
        assert stats.done == n, stats
        return n / (time.perf_counter() - start)


def pool_tasks(d: str, n: int) -> float:
    path = os.path.join(d, "q.fs")
    prefill(path, n)

    async def noop(job: Any) -> None:
        pass

    async def main() -> float:
        async with ackqueue.AsyncAckQueue(path) as q:
            pool = ackqueue.AsyncWorkerPool(q, noop, concurrency=8, log_interval=3600)
            start = time.perf_counter()
            stats = await pool.run_until_empty()
            assert stats.done == n, stats
            return n / (time.perf_counter() - start)

    return asyncio.run(main())


# -- many waiters ------------------------------------------------------------------------------


def many_waiters(d: str, waiters: int, samples: int) -> dict[str, float]:
    """RSS and threads of ``waiters`` tasks awaiting get(); wake-up latency of a thread's put."""
    path = os.path.join(d, "q.fs")
    got_at: dict[int, float] = {}
    arrived = threading.Event()
    figures: dict[str, float] = {}

    async def main() -> None:
        async with ackqueue.AsyncAckQueue(path) as q:
            listeners = ready_listeners(q.sync)
            await q.put("warm-up")
            async with q.connect() as cons:
                await cons.ack(await cons.get())

            async def waiter() -> None:
                async with q.connect() as cons:
                    item = await cons.get()
                    got_at[item] = time.perf_counter()
                    arrived.set()
                    await cons.ack(item)

            gc.collect()
            rss_before, threads_before = c.rss_mb(), threading.active_count()
            tasks = [asyncio.create_task(waiter()) for _ in range(waiters)]
            while len(listeners) < waiters:
                await asyncio.sleep(0.01)
            figures["rss_mb"] = c.rss_mb() - rss_before
            figures["threads"] = threading.active_count() - threads_before
            after_put: list[float] = []
            from_call: list[float] = []

            def producer() -> None:
                for i in range(samples):
                    while len(listeners) < waiters - i:  # every waiter left is waiting again
                        time.sleep(0.0005)
                    arrived.clear()
                    called = time.perf_counter()
                    q.sync.put(i)
                    returned = time.perf_counter()
                    arrived.wait()
                    after_put.append(got_at[i] - returned)
                    from_call.append(got_at[i] - called)

            await asyncio.get_running_loop().run_in_executor(None, producer)
            figures["after_put_p50"] = percentile(after_put, 50)
            figures["after_put_p99"] = percentile(after_put, 99)
            figures["from_call_p50"] = percentile(from_call, 50)
            figures["from_call_p99"] = percentile(from_call, 99)
            await q.shutdown(immediate=True)
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return figures


def one_thread_waiter(d: str, samples: int) -> dict[str, float]:
    """The same wake-up with one thread blocked in a consumer's get()."""
    with ackqueue.AckQueue(os.path.join(d, "q.fs")) as q:
        got_at: dict[int, float] = {}
        arrived = threading.Event()
        waiting = threading.Event()

        def consumer() -> None:
            with q.connect() as cons:
                for _ in range(samples):
                    waiting.set()
                    item = cons.get()
                    got_at[item] = time.perf_counter()
                    arrived.set()
                    cons.ack(item)

        t = threading.Thread(target=consumer)
        t.start()
        after_put, from_call = [], []
        for i in range(samples):
            waiting.wait()
            waiting.clear()
            time.sleep(0.002)  # let it reach its wait (a benchmark, not a test)
            arrived.clear()
            called = time.perf_counter()
            q.put(i)
            returned = time.perf_counter()
            arrived.wait()
            after_put.append(got_at[i] - returned)
            from_call.append(got_at[i] - called)
        t.join()
    return {"after_put_p50": percentile(after_put, 50),
            "after_put_p99": percentile(after_put, 99),
            "from_call_p50": percentile(from_call, 50),
            "from_call_p99": percentile(from_call, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--pool-n", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    c.header("ackqueue asyncio beside threads")
    n, runs = args.n, args.runs
    rows: list[list[str]] = []

    def pair(what: str, threaded: Any, tasks: Any, unit: str) -> None:
        t_runs, a_runs = [], []
        for _ in range(runs):
            with c.tmpdir() as d:
                t_runs.append(threaded(d))
            with c.tmpdir() as d:
                a_runs.append(tasks(d))
        t, a = c.median(t_runs), c.median(a_runs)
        print(f"  {what:<34} threads {t:>9,.0f}  async {a:>9,.0f} {unit}  ratio {a / t:.2f}")
        rows.append([what, f"{t:,.0f}", f"{a:,.0f}", f"{a / t:.2f}x"])

    pair("get+ack, 1 consumer (items/s)", lambda d: getack_threads(d, n, 1),
         lambda d: getack_tasks(d, n, 1), "items/s")
    pair("get+ack, 4 consumers (items/s)", lambda d: getack_threads(d, n, 4),
         lambda d: getack_tasks(d, n, 4), "items/s")
    pair(f"pool no-op, 8, n {args.pool_n:,} (jobs/s)", lambda d: pool_threads(d, args.pool_n),
         lambda d: pool_tasks(d, args.pool_n), "jobs/s")
    print(c.rst_table(rows, ["scenario", "threads", "async", "async/threads"]))

    print("\nacks from 64 tasks, by the async queue's commit threads (items/s):")
    commit_rows = []
    for threads in (1, 2, 8):
        values = []
        for _ in range(runs):
            with c.tmpdir() as d:
                values.append(getack_tasks(d, n, 64, threads))
        commit_rows.append([str(threads), f"{c.median(values):,.0f}"])
    print(c.rst_table(commit_rows, ["threads", "acks/s"]))

    with c.tmpdir() as d:
        many = many_waiters(d, args.waiters, args.samples)
    with c.tmpdir() as d:
        one = one_thread_waiter(d, args.samples)
    print(f"\n{args.waiters:,} tasks awaiting get(): +{many['rss_mb']:.1f} MB RSS "
          f"({many['rss_mb'] * 1024 / args.waiters:.2f} KB a waiter), "
          f"+{many['threads']:.0f} threads")
    wake_rows = []
    for who, f in ((f"{args.waiters:,} tasks", many), ("1 thread", one)):
        wake_rows.append([who] + [f"{f[k] * 1e3:.3f}" for k in
                                  ("after_put_p50", "after_put_p99", "from_call_p50",
                                   "from_call_p99")])
    print(c.rst_table(wake_rows, ["waiting", "after put p50 ms", "p99 ms", "from call p50 ms",
                                  "p99 ms"]))


if __name__ == "__main__":
    main()
