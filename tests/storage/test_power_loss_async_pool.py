"""The power-loss promise on the paths built on the queue's calls: the asyncio classes, whose
commits run on threads, and the worker pools, which ack in batches and count a job done only
once its ack is durable (docs/tutorial/thread-pool.rst). Seen at the fsync call
itself, as in test_power_loss.py.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fsync_log import FsyncLog, watch_fsyncs
from polling import wait_until

import ackqueue


@pytest.fixture
def fsyncs(qpath: str, monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    return watch_fsyncs(qpath, monkeypatch)


async def _put(q: Any) -> None:
    await q.put("item")


async def _put_by_key(q: Any) -> None:
    assert await q.put("page", key="https://example.org/") is True


async def _put_with_group(q: Any) -> None:
    await q.put("page", group="example.org")


async def _ack(q: Any) -> None:
    async with q.connect() as c:
        await c.ack(await c.get())


async def _ack_many(q: Any) -> None:
    async with q.connect() as c:
        await c.ack_many(await c.get_many(2))


async def _transaction(q: Any) -> None:
    async with q.connect() as c:
        item = await c.get()
        async with c.transaction():
            await c.ack(item)
            await q.put("follow-up")


ASYNC_CALLS: dict[str, Callable[[Any], Awaitable[None]]] = {
    "put": _put,
    "put by key": _put_by_key,
    "put with group": _put_with_group,
    "ack": _ack,
    "ack_many": _ack_many,
    "transaction": _transaction,
}


@pytest.mark.parametrize("name", list(ASYNC_CALLS))
def test_strict_async_call_returns_only_after_an_fsync_covering_what_it_wrote(qpath, fsyncs, name):
    async def main() -> None:
        async with ackqueue.AsyncAckQueue(qpath, autopack=False) as q:
            await q.put_many(["before", "also before"])
            size_before, mark = os.path.getsize(qpath), fsyncs.mark()
            await ASYNC_CALLS[name](q)
            size_after = os.path.getsize(qpath)
            assert size_after > size_before, f"{name} wrote nothing to the queue file"
            assert fsyncs.covered_since(mark, size_after), (
                f"async {name} returned before the queue file was fsynced up to {size_after} "
                f"bytes: fsyncs seen during the call covered {fsyncs.sizes[mark:]}"
            )

    asyncio.run(main())


def _run_thread_pool(qpath: str, started: Callable[[Any], None]) -> ackqueue.PoolStats:
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        pool = ackqueue.WorkerPool(q, lambda job: None, threads=1)
        started(pool)
        return pool.run_until_empty()


def _run_async_pool(qpath: str, started: Callable[[Any], None]) -> ackqueue.PoolStats:
    async def handle(job: object) -> None:
        pass

    async def main() -> ackqueue.PoolStats:
        async with ackqueue.AsyncAckQueue(qpath, autopack=False) as q:
            pool = ackqueue.AsyncWorkerPool(q, handle, concurrency=1)
            started(pool)
            return await pool.run_until_empty()

    return asyncio.run(main())


POOLS = {"WorkerPool": _run_thread_pool, "AsyncWorkerPool": _run_async_pool}


@pytest.mark.parametrize("kind", list(POOLS))
def test_a_pool_counts_a_job_done_only_once_its_ack_is_fsynced(qpath, fsyncs, kind):
    """The ack's fsync is held until the test has looked: while it is held the job is not
    done; once it ran, the job is."""
    with ackqueue.AckQueue(qpath, autopack=False) as q:
        q.put("job")
    in_fsync, release = threading.Event(), threading.Event()
    pools: list[Any] = []
    results: list[ackqueue.PoolStats] = []

    def started(pool: Any) -> None:
        base = os.path.getsize(qpath)  # the queue is open: what the file grows by is the ack

        def gate(size: int) -> None:
            if size > base and not in_fsync.is_set():
                in_fsync.set()
                release.wait(60)

        pools.append(pool)
        fsyncs.gate = gate

    runner = threading.Thread(
        target=lambda: results.append(POOLS[kind](qpath, started)), daemon=True
    )
    runner.start()
    try:
        wait_until(in_fsync.is_set, timeout=60, what=f"the fsync of the {kind}'s ack")
        assert pools[0].stats.done == 0, "the job was counted done before its ack's fsync ran"
    finally:
        release.set()
    runner.join(120)
    assert not runner.is_alive(), f"{kind}.run_until_empty() did not return"
    assert results[0].done == 1
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 0 and q.unacked_count() == 0
