"""AsyncWorkerPool: ack on success, retry with backoff, dead letters, graceful stop on a
signal, stats; real loops, real files, real child processes for the signals."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import threading
from typing import Any

import pytest
from aiohelp import eventually, stored
from conftest import child_argv, child_env

import ackqueue
from ackqueue import AsyncAckQueue, AsyncWorkerPool, Retry


def test_every_item_is_handled_once_and_acked(qpath):
    handled: list[int] = []

    async def handler(item: int) -> None:
        await asyncio.sleep(0)
        handled.append(item)

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(range(500))
            stats = await AsyncWorkerPool(q, handler, concurrency=16).run_until_empty()
            assert q.qsize() == 0 and q.unacked_count() == 0
            return stats

    stats = asyncio.run(main())
    assert sorted(handled) == list(range(500))
    assert (stats.done, stats.failed, stats.dead, stats.stopped_by) == (500, 0, 0, None)
    assert stored(qpath) == []


def test_failures_are_retried_and_a_poison_item_goes_to_the_dead_letters(qpath):
    tries: dict[int, int] = {}

    async def handler(item: int) -> None:
        tries[item] = tries.get(item, 0) + 1
        if item == 0 or (item == 1 and tries[item] < 3):
            raise ValueError(f"item {item} failed")

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(range(5))
            pool = AsyncWorkerPool(q, handler, 2, Retry(base=0.01, jitter=0, max_attempts=4))
            stats = await pool.run_until_empty()
            [dead] = await q.dead_letters()
            assert dead.item == 0 and "item 0 failed" in dead.reason
            return stats

    stats = asyncio.run(main())
    assert tries == {0: 4, 1: 3, 2: 1, 3: 1, 4: 1}
    assert (stats.done, stats.failed, stats.dead) == (4, 6, 1)


def test_stop_lets_running_handlers_finish_and_gives_back_the_rest(qpath):
    started = asyncio.Event()
    release = asyncio.Event()
    done: list[int] = []

    async def handler(item: int) -> None:
        started.set()
        await release.wait()
        done.append(item)

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(range(50))
            pool = AsyncWorkerPool(q, handler, concurrency=2)
            run = asyncio.create_task(pool.run())
            await started.wait()
            pool.stop()
            release.set()
            stats = await run
            assert q.unacked_count() == 0
            return stats

    stats = asyncio.run(main())
    assert stats.stopped_by == "stop()" and stats.done == len(done) >= 1
    assert sorted(done + stored(qpath)) == list(range(50))


def test_a_handler_outliving_stop_timeout_gives_its_item_back(qpath):
    async def handler(item: int) -> None:
        await asyncio.Event().wait()  # never

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(range(3))
            pool = AsyncWorkerPool(q, handler, concurrency=1, stop_timeout=0.05)
            run = asyncio.create_task(pool.run())
            await eventually(q.unacked_count, 60, "the pool holding an item")
            pool.stop()
            return await run

    stats = asyncio.run(main())
    assert stats.done == 0
    assert stored(qpath) == [0, 1, 2]


POOL_CHILD = """
import asyncio, logging, os, sys
import ackqueue

path, log_path = sys.argv[1], sys.argv[2]
logging.basicConfig(level=logging.INFO)

async def main():
    async with ackqueue.AsyncAckQueue(path) as q:
        if q.qsize() == 0:
            await q.put_many(range(40))
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

        async def handler(item):
            print(f"start {item}", flush=True)
            await asyncio.sleep(0.02)
            os.write(fd, f"{item}\\n".encode())

        stats = await ackqueue.AsyncWorkerPool(q, handler, concurrency=2).run()
    print(f"stopped cleanly by {stats.stopped_by}", flush=True)
    return stats

sys.exit(asyncio.run(main()).exit_code)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_gracefully_and_loses_nothing(tmp_path, signum):
    path, log_path = str(tmp_path / "pool.fs"), str(tmp_path / "done.log")
    child = subprocess.Popen(
        child_argv(POOL_CHILD, path, log_path), env=child_env(PYTHONFAULTHANDLER="1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # A child stuck for a minute is aborted: faulthandler then writes every thread's stack to
    # its stderr, which the failure shows (it hung once in CI on Python 3.13, 2026-11-26).
    watchdog = threading.Timer(60, child.send_signal, args=(signal.SIGABRT,))
    watchdog.daemon = True
    watchdog.start()
    started = 0
    while started < 5:
        line = child.stdout.readline()
        assert line, f"child ended early: {child.stderr.read()}"
        started += line.startswith("start ")
    child.send_signal(signum)
    out, err = child.communicate(timeout=60)
    watchdog.cancel()
    assert child.returncode == 128 + signum, err
    assert f"stopped cleanly by {signal.Signals(signum).name}" in out
    assert "Ctrl-C again" in err
    with open(log_path) as f:
        done = [int(line) for line in f]
    assert len(done) < 40, "the pool finished before the signal; the test proved nothing"
    assert sorted(done + stored(path)) == list(range(40))  # each done once, or still queued
    assert os.path.exists(path)


def test_a_queue_closed_under_the_pool_says_closed_not_drained(qpath):
    """As the thread pool's (tests/workers/test_pool_faults.py): a run its queue's close()
    ended reports ``stopped_by == "closed"``, and what it did not handle stays queued."""
    handled: list[int] = []

    async def main() -> ackqueue.PoolStats:
        q: AsyncAckQueue[int] = AsyncAckQueue(qpath)
        await q.put_many(range(20))

        async def close_on_the_third(item: int) -> None:
            handled.append(item)
            if len(handled) == 3:
                await q.close()

        pool = AsyncWorkerPool(q, close_on_the_third, concurrency=1, prefetch=1, poll=0.05)
        return await asyncio.wait_for(pool.run_until_empty(), 60)

    stats = asyncio.run(main())
    assert (stats.stopped_by, stats.exit_code, stats.interrupted) == ("closed", 0, False)
    left = stored(qpath)
    assert len(left) >= 17 and sorted(set(left) | set(handled)) == list(range(20)), left


@pytest.mark.parametrize("lease", [
    pytest.param(False, id="prefetch=1"), pytest.param(True, id="leased, one worker"),
])
def test_a_prefetch_of_one_drains_the_queue(qpath, lease):
    """With a prefetch of 1 (given, or the default of one worker on a queue with a lease)
    the feeder waited for a refill signal that no worker's get ever gave: the pool hung after
    its first item."""
    done: list[int] = []

    async def handler(item: int) -> None:
        done.append(item)

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath, ack_timeout=60 if lease else None) as q:
            await q.put_many(range(10))
            pool = AsyncWorkerPool(q, handler, concurrency=1, prefetch=None if lease else 1)
            assert pool.prefetch == 1
            return await asyncio.wait_for(pool.run_until_empty(), 60)

    stats = asyncio.run(main())
    assert (stats.done, stats.stopped_by, sorted(done)) == (10, None, list(range(10)))
    assert stored(qpath) == []


SLOW_TAKES_CHILD = """
import asyncio, os, random, sys, tempfile, time
from ackqueue import AsyncAckQueue, AsyncWorkerPool
from ackqueue.queue.consumer import Consumer

real_get_many = Consumer.get_many

def slow_get_many(self, *args, **kwargs):
    time.sleep(random.random() * 0.01)  # a take on a loaded machine
    return real_get_many(self, *args, **kwargs)

Consumer.get_many = slow_get_many
for run in range(int(sys.argv[2])):
    path = os.path.join(sys.argv[1], f"q{run}.fs")
    done = []

    async def handler(item):
        await asyncio.sleep(random.random() * 0.002)
        done.append(item)

    async def main():
        async with AsyncAckQueue(path) as q:
            await q.put_many(range(30))
            pool = AsyncWorkerPool(q, handler, concurrency=1 + run % 3, poll=0.5)
            return await pool.run_until_empty()

    stats = asyncio.run(main())
    assert sorted(done) == list(range(30)) and stats.stopped_by is None, (done, stats)
print("drained", sys.argv[2])
"""


def test_a_feeder_whose_room_the_other_feeders_get_takes_waits_instead_of_spinning(tmp_path):
    """The two feeders of a pool count each other's gets under way against the prefetch.
    When the other feeder's get (waiting on the event loop for the queue) left too little
    room while the buffer was below half, the feeder looped back at once without awaiting:
    it spun for ever, and that get, the workers and even SIGTERM (handled on the loop) never
    ran. Takes slowed by a few random milliseconds, as on a loaded machine, hit it within a
    few runs of one to three workers (seen once in CI, on an unslowed loaded run)."""
    runs = 20
    try:
        child = subprocess.run(
            child_argv(SLOW_TAKES_CHILD, str(tmp_path), str(runs)), env=child_env(),
            capture_output=True, text=True, timeout=150,
        )
    except subprocess.TimeoutExpired as exc:  # run() kills the child (SIGKILL) first
        raise AssertionError(f"the pool spun and never drained: {exc.stdout!r}") from None
    assert child.returncode == 0 and child.stdout.strip() == f"drained {runs}", child.stderr


def test_buffered_items_whose_lease_ran_out_are_not_handled_from_the_stale_buffer(qpath):
    """As the thread pool's workers: an item that waited in the buffer past its
    ``ack_timeout`` was taken back (and delivered again), so it is given back unstarted,
    not handled from the stale copy as well."""
    seen: list[int] = []

    async def handler(item: int) -> None:
        seen.append(item)
        if len(seen) == 1:
            await asyncio.sleep(0.45)  # a slow job: every lease of that first batch runs out

    async def main() -> ackqueue.PoolStats:
        # The items are small ints: a redelivery of one is the same object as its stale copy
        # in the buffer, and giving the copy back gave back the redelivery (run twice).
        async with AsyncAckQueue(qpath, ack_timeout=0.3) as q:
            await q.put_many(range(4))
            pool = AsyncWorkerPool(q, handler, concurrency=1, prefetch=4)
            stats = await asyncio.wait_for(pool.run_until_empty(), 60)
            assert q.qsize() == 0 and q.unacked_count() == 0
            return stats

    stats = asyncio.run(main())
    assert stats.done == 4
    first = seen[0]
    # The slow one ran twice (its lease ran out under it); the others waited in the buffer
    # past their leases and were given back unstarted, so each ran once, when got again.
    assert seen.count(first) == 2
    assert all(seen.count(n) == 1 for n in range(4) if n != first), seen


def test_run_until_empty_waits_for_a_retry_the_queue_counts_ready_only_after_its_time(qpath):
    """As the thread pool's: a retry falls due by the pool's reckoning a moment before the
    queue's timer moves it to the ready items; the run must not end in that moment. Here the
    queue's clock is late by 0.5 s on purpose."""
    clock = ackqueue.ManualClock()
    calls: list[str] = []

    async def handler(item: str) -> None:
        calls.append(item)
        if len(calls) == 1:
            raise RuntimeError("flaky")

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath, clock=clock) as q:
            await q.put("flaky-job")
            late = threading.Timer(0.5, clock.advance, args=(60,))
            late.start()
            try:
                pool = AsyncWorkerPool(q, handler, concurrency=1,
                                       retry=Retry(base=0.01, factor=2.0, jitter=0.0))
                stats = await asyncio.wait_for(pool.run_until_empty(), 60)
            finally:
                late.join()
            assert q.qsize() == 0 and q.unacked_count() == 0 and q.sync.delayed_count() == 0
            return stats

    stats = asyncio.run(main())
    assert calls == ["flaky-job"] * 2
    assert (stats.done, stats.failed) == (1, 1)


def test_run_on_a_shut_down_queue_handles_what_it_holds_before_it_ends(qpath):
    """After a graceful ``shutdown()`` a get raises ShutDown as soon as nothing is ready, while
    the pool's buffer still holds items: the run handles them (and whatever comes back)
    before it ends, as drained."""
    handled: list[int] = []

    async def handler(item: int) -> None:
        await asyncio.sleep(0.005)  # the last gets find everything taken and buffered
        handled.append(item)

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(range(200))
            await q.shutdown()
            stats = await asyncio.wait_for(AsyncWorkerPool(q, handler, concurrency=2).run(), 60)
            assert q.qsize() == 0 and q.unacked_count() == 0
            return stats

    stats = asyncio.run(main())
    assert sorted(handled) == list(range(200))
    assert (stats.done, stats.stopped_by) == (200, None)


def test_stopping_gives_back_prefetched_items_in_place_without_spending_an_attempt(qpath):
    """As the thread pool's: with ``max_attempts=1`` every prefetched item is at its last
    attempt, and a plain nack of those no handler ran buried them when the pool stopped."""
    started = asyncio.Event()
    release = asyncio.Event()
    handled: list[int] = []

    async def handler(item: int) -> None:
        handled.append(item)
        started.set()
        await release.wait()

    async def main() -> tuple[ackqueue.PoolStats, list[int], set[int]]:
        async with AsyncAckQueue(qpath, max_attempts=1) as q:
            await q.put_many(range(50))
            pool = AsyncWorkerPool(q, handler, concurrency=1, prefetch=20)
            run = asyncio.create_task(pool.run())
            await started.wait()
            await eventually(lambda: q.unacked_count() >= 10, 10, "the pool prefetching")
            pool.stop()
            release.set()
            stats = await run
            assert await q.dead_letters() == []
            assert (q.qsize(), q.unacked_count()) == (49, 0)
            async with q.connect() as c:
                again = [await c.get_nowait() for _ in range(49)]
                attempts = {c.delivery(item).attempts for item in again}
            return stats, again, attempts

    stats, again, attempts = asyncio.run(main())
    assert (stats.done, stats.stopped_by) == (1, "stop()")
    assert again == sorted(set(range(50)) - set(handled))  # each in its place
    assert attempts == {1}  # the delivery that never ran did not count


def test_run_until_empty_waits_for_the_items_their_group_rules_hold_back(qpath):
    """As the thread pool's: qsize() leaves out what a group's cap or interval holds back
    (here longer than the pool's poll), and the run ended after the first item of each."""
    handled: list[tuple[str, int]] = []

    async def handler(item: tuple[str, int]) -> None:
        handled.append(item)

    async def main() -> ackqueue.PoolStats:
        async with AsyncAckQueue(qpath, max_held_per_group=1, group_interval=0.1) as q:
            for n in range(6):
                await q.put(("a", n), group="a")
                await q.put(("b", n), group="b")
            stats = await asyncio.wait_for(
                AsyncWorkerPool(q, handler, concurrency=4, poll=0.05).run_until_empty(), 60
            )
            assert (q.qsize(), q.unacked_count(), q.sync.stored_count()) == (0, 0, 0)
            return stats

    stats = asyncio.run(main())
    assert sorted(handled) == sorted((g, n) for g in "ab" for n in range(6))
    assert (stats.done, stats.stopped_by) == (12, None)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


@pytest.mark.parametrize("raised, reason", [
    (ValueError("cannot parse"), "ValueError: cannot parse"),
    (Unprintable(), "Unprintable: <str() failed: RuntimeError>"),
])
def test_a_retry_limit_above_the_queues_buries_at_the_queues_with_the_exception(
    qpath, raised, reason
):
    calls: list[str] = []

    async def handler(item: str) -> None:
        calls.append(item)
        raise raised

    async def main() -> tuple[ackqueue.PoolStats, list[Any]]:
        async with AsyncAckQueue(qpath, max_attempts=2) as q:
            await q.put("poison")
            retry = Retry(base=0.01, jitter=0, max_attempts=5)
            stats = await AsyncWorkerPool(q, handler, 1, retry).run_until_empty()
            assert (q.qsize(), q.unacked_count()) == (0, 0)
            return stats, await q.dead_letters()

    stats, letters = asyncio.run(main())
    assert calls == ["poison", "poison"]
    assert [(letter.attempts, letter.reason) for letter in letters] == [(2, reason)]
    assert (stats.failed, stats.dead, stats.stopped_by) == (2, 1, None)


def test_a_stop_before_run_ends_the_next_run_at_once_and_the_pool_runs_again_after(qpath):
    handled: list[int] = []

    async def handler(item: int) -> None:
        handled.append(item)

    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(range(20))
            pool = AsyncWorkerPool(q, handler, concurrency=2)
            pool.stop()
            stats = await asyncio.wait_for(pool.run_until_empty(), 60)
            assert (stats.stopped_by, stats.done, handled, q.qsize()) == ("stop()", 0, [], 20)
            stats = await asyncio.wait_for(pool.run_until_empty(), 60)  # for one run only
            assert (stats.stopped_by, stats.done, q.qsize()) == (None, 20, 0)

    asyncio.run(main())
    assert sorted(handled) == list(range(20))


def test_an_item_the_queue_buries_at_the_pools_get_counts_as_dead(qpath):
    """As the thread pool's: an item delivered ``max_attempts`` times without an ack (its
    handler killed the process each time, say) goes to the dead letters at the pool's get,
    buried by the queue; the pool's stats said dead=0."""
    with ackqueue.AckQueue(qpath, max_attempts=2) as sync:
        sync.put("spent")
    for _ in range(2):  # delivered twice by programs that then ended, never acked
        with ackqueue.AckQueue(qpath, max_attempts=2) as sync:
            sync.connect().get_nowait()
    handled: list[str] = []

    async def handler(item: str) -> None:
        handled.append(item)

    async def main() -> tuple[ackqueue.PoolStats, list[Any]]:
        async with AsyncAckQueue(qpath, max_attempts=2) as q:
            await q.put_many(["a", "b"])
            stats = await asyncio.wait_for(
                AsyncWorkerPool(q, handler, concurrency=2).run_until_empty(), 60
            )
            assert (q.qsize(), q.unacked_count()) == (0, 0)
            return stats, await q.dead_letters()

    stats, letters = asyncio.run(main())
    assert [letter.item for letter in letters] == ["spent"]
    assert sorted(handled) == ["a", "b"]
    assert (stats.done, stats.failed, stats.dead, stats.stopped_by) == (2, 0, 1, None)


def test_an_item_that_cannot_be_loaded_goes_to_the_dead_letters_and_the_pool_goes_on(
    qpath, vanishing_class, caplog
):
    """As the thread pool's: the queue buries an item whose class is gone at the pool's get,
    which raises ItemLoadError; the feeder took that for its own failure and stopped the pool
    by an error. With a prefetch of 1 every such item is at the head of a get."""
    module, remove = vanishing_class
    with ackqueue.AckQueue(qpath) as sync:
        for n in range(12):
            if n % 3 == 0:
                sync.put(module.Gone())
            sync.put(n)
    remove()
    handled: list[int] = []

    async def handler(item: int) -> None:
        handled.append(item)

    async def main() -> tuple[ackqueue.PoolStats, list[Any]]:
        async with AsyncAckQueue(qpath) as q:
            pool = AsyncWorkerPool(q, handler, concurrency=2, prefetch=1)
            stats = await asyncio.wait_for(pool.run_until_empty(), 60)
            assert (stats.stopped_by, stats.done, stats.failed, stats.dead) == (None, 12, 0, 4)
            assert (q.qsize(), q.unacked_count()) == (0, 0)
            return stats, await q.dead_letters()

    with caplog.at_level(logging.WARNING, logger="ackqueue"):
        stats, letters = asyncio.run(main())
    assert sorted(handled) == list(range(12))
    assert len(letters) == 4 and all("cannot load" in d.reason for d in letters)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("feeder failed" in m for m in messages), messages
    assert any("cannot load" in m and "dead letters" in m for m in messages), messages


def test_each_run_reports_its_own_counts(qpath):
    """As the thread pool's: a pool run again reported the counts of every run so far, and
    the stats a first run returned changed under its caller as the second one ran."""
    async def handler(item: object) -> None:
        if item == "poison":
            raise ValueError("cannot parse")

    async def main() -> tuple[ackqueue.PoolStats, ackqueue.PoolStats]:
        async with AsyncAckQueue(qpath, max_attempts=1) as q:
            pool = AsyncWorkerPool(q, handler, concurrency=2, retry=Retry(base=0.01))
            await q.put_many(["poison", 1, 2, 3])
            first = await asyncio.wait_for(pool.run_until_empty(), 60)
            await q.put_many([4, 5])
            second = await asyncio.wait_for(pool.run_until_empty(), 60)
            assert pool.stats == second
            return first, second

    first, second = asyncio.run(main())
    assert (first.done, first.failed, first.dead, first.stopped_by) == (3, 1, 1, None)
    assert (second.done, second.failed, second.dead, second.stopped_by) == (2, 0, 0, None)
