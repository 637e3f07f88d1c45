"""Every pool setting drains the queue: WorkerPool and AsyncWorkerPool over the range of their
threads/concurrency, prefetch and a lease, with handlers that fail and succeed on retry.

AsyncWorkerPool with a prefetch of 1 (the default for one worker on a leased queue) once
handled its first items and then waited for ever: a hand-picked example never used that
setting. Here hypothesis draws the settings, and each run must end by itself with every item
handled until it succeeds or has failed ``max_attempts`` times (then it is in the dead letters,
once, with its attempts), nothing held and nothing left.
"""

from __future__ import annotations

import asyncio
import collections
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ackqueue
from ackqueue import AckQueue, AsyncAckQueue, AsyncWorkerPool, Retry, WorkerPool

ATTEMPTS = 3  # an item failing this many runs goes to the dead letters
RETRY = Retry(base=0.0, jitter=0.0, max_attempts=ATTEMPTS)  # again at once
SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
pool_settings = st.fixed_dictionaries({
    "workers": st.integers(1, 3),
    "prefetch": st.sampled_from([None, 1, 2, 3, 5]),
    "lease": st.sampled_from([None, 60.0]),
    "items": st.integers(0, 25),
    # item i fails its first ``fails[i % len(fails)]`` runs (3 or more: it is buried)
    "fails": st.lists(st.integers(0, 4), min_size=1, max_size=4),
})


def check(runs: collections.Counter[int], plan: dict[str, object], stats: ackqueue.PoolStats,
          path: str) -> None:
    n = plan["items"]
    fails = plan["fails"]
    assert isinstance(n, int) and isinstance(fails, list)
    buried = sorted(i for i in range(n) if fails[i % len(fails)] >= ATTEMPTS)
    assert stats.stopped_by is None and stats.exit_code == 0, (plan, stats)
    assert (stats.done, stats.dead) == (n - len(buried), len(buried)), (plan, stats)
    assert runs == {i: min(fails[i % len(fails)] + 1, ATTEMPTS) for i in range(n)}, (plan, runs)
    with AckQueue(path) as q:
        assert (q.qsize(), q.unacked_count()) == (0, 0), plan
        dead = q.dead_letters()
        assert sorted(d.item for d in dead) == buried, (plan, dead)
        assert all(d.attempts == ATTEMPTS for d in dead), (plan, dead)


@SETTINGS
@given(plan=pool_settings)
def test_a_thread_pool_drains_the_queue_whatever_its_settings(tmp_path_factory, plan):
    path = str(tmp_path_factory.mktemp("pool") / "q.fs")
    runs: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    fails = plan["fails"]

    def handler(item: int) -> None:
        with lock:
            runs[item] += 1
            failing = runs[item] <= fails[item % len(fails)]
        if failing:
            raise ValueError(f"run {runs[item]} of item {item} fails")

    with AckQueue(path, ack_timeout=plan["lease"]) as q:
        q.put_many(list(range(plan["items"])))
        pool = WorkerPool(
            q, handler, threads=plan["workers"], retry=RETRY, prefetch=plan["prefetch"],
            poll=0.02,
        )
        outcome: list[ackqueue.PoolStats] = []
        runner = threading.Thread(target=lambda: outcome.append(pool.run_until_empty()))
        runner.start()
        runner.join(60)
        assert not runner.is_alive(), f"run_until_empty() did not return: {plan}"
    check(runs, plan, outcome[0], path)


@SETTINGS
@given(plan=pool_settings)
def test_an_asyncio_pool_drains_the_queue_whatever_its_settings(tmp_path_factory, plan):
    path = str(tmp_path_factory.mktemp("apool") / "q.fs")
    runs: collections.Counter[int] = collections.Counter()
    fails = plan["fails"]

    async def handler(item: int) -> None:
        runs[item] += 1
        await asyncio.sleep(0)
        if runs[item] <= fails[item % len(fails)]:
            raise ValueError(f"run {runs[item]} of item {item} fails")

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(path, ack_timeout=plan["lease"]) as q:
            await q.put_many(range(plan["items"]))
            pool = AsyncWorkerPool(
                q, handler, concurrency=plan["workers"], retry=RETRY,
                prefetch=plan["prefetch"], poll=0.02,
            )
            try:
                return await asyncio.wait_for(pool.run_until_empty(), 60)
            except asyncio.TimeoutError:  # not the builtin before Python 3.11
                raise AssertionError(f"run_until_empty() did not return: {plan}") from None

    check(runs, plan, asyncio.run(main()), path)
