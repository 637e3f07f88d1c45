"""The async API does what the sync one does, awaited: real event loops, real files."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohelp import eventually, run_ends, stored, wait_for_waiters

import ackqueue
from ackqueue import AsyncAckQueue, AsyncLifoAckQueue, AsyncPriorityAckQueue


def test_put_get_ack_round_trip_survives_reopen(qpath):
    async def first() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put("a")
            await q.put_many(["b", "c", "d"])
            assert await q.get() == "a"
            async with q.connect() as c:
                b = await c.get()
                await c.ack(b)
                c_item = await c.get()
                await c.nack(c_item)
                assert await c.get() == "c"  # given back in its place
                # leaving the block gives "c" back

    asyncio.run(first())
    assert stored(qpath) == ["c", "d"]


def test_get_many_ack_many_and_kinds(tmp_path):
    async def main() -> None:
        async with AsyncLifoAckQueue(str(tmp_path / "l.fs")) as lifo:
            await lifo.put_many([1, 2, 3])
            async with lifo.connect() as c:
                got = await c.get_many(5)
                assert got == [3, 2, 1]
                await c.ack_many(got)
            assert lifo.qsize() == 0 and lifo.unacked_count() == 0
        async with AsyncPriorityAckQueue(str(tmp_path / "p.fs")) as prio:
            for item in [(3, "c"), (1, "a"), (2, "b")]:
                await prio.put(item)
            assert [await prio.get() for _ in range(3)] == [(1, "a"), (2, "b"), (3, "c")]
        async with AsyncAckQueue(str(tmp_path / "q.fs")) as q:
            await q.put("low", priority=5)  # keyword options reach the sync put as they are
            await q.put("late", delay=30)
            assert q.qsize() == 1 and q.delayed_count() == 1

    asyncio.run(main())


def test_timeouts_raise_empty_and_take_nothing(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q, q.connect() as c:
            started = time.monotonic()
            with pytest.raises(ackqueue.Empty):
                await c.get(timeout=0.05)
            assert time.monotonic() - started >= 0.05
            with pytest.raises(ackqueue.Empty):
                await q.get_nowait()
            with pytest.raises(ValueError):
                await c.get(timeout=-1)
            assert len(c.deliveries()) == 0

    asyncio.run(main())


def test_argument_rules_are_the_sync_queues_and_bad_input_stores_nothing(qpath):
    """As ``queue.Queue``: a put's timeout matters (and is checked) only on a bounded queue;
    a get's negative timeout is a ValueError. Bad keys and groups store nothing."""

    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put("a", timeout=-1)
            await q.put("b", key="b", timeout=-1)
            with pytest.raises(ValueError, match="non-negative"):
                await q.get(timeout=-1)
            with pytest.raises(ackqueue.KeyTypeError):
                await q.put("c", key=["c"])
            with pytest.raises(TypeError, match="group must be a str"):
                await q.put("c", group=3)
            assert q.qsize() == 2
        async with AsyncPriorityAckQueue(None) as by_item:
            with pytest.raises(ValueError, match="omit priority="):
                await by_item.put(1, priority=1)
        async with AsyncAckQueue(None, maxsize=1) as bounded:
            with pytest.raises(ValueError, match="non-negative"):
                await bounded.put("x", key="x", timeout=-1)
            assert bounded.qsize() == 0

    asyncio.run(main())


def test_dead_letters_leases_and_forwarded_methods(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath, max_attempts=2, ack_timeout=30) as q:
            await q.put("poison")
            async with q.connect() as c:
                for _ in range(2):
                    item = await c.get()
                    assert c.delivery(item).attempts >= 1
                    await c.extend(item, 60)
                    await c.nack(item)
                with pytest.raises(ackqueue.Empty):
                    await c.get(timeout=0)
            # Every other method of the sync queue, awaited (run on the queue's threads).
            assert await q.dead_count() == 1
            [dead] = await q.dead_letters()
            assert dead.item == "poison"
            assert await q.requeue_dead() == 1
            async with q.connect() as c:
                item = await c.get()
                await c.reject(item, "no")
            metrics = await q.metrics()
            assert metrics.dead == 1 and metrics.ready == 0
            assert await q.purge_dead() == 1

    asyncio.run(main())


def test_transaction_commits_together_or_rolls_back(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put("page")
            async with q.connect() as c:
                async with c.transaction():
                    page = await c.get()
                    await q.put_many(["link1", "link2"])
                    await c.ack(page)
                assert q.qsize() == 2
                with pytest.raises(RuntimeError):
                    async with q.transaction():
                        link = await c.get()
                        await c.ack(link)
                        await q.put("never")
                        raise RuntimeError("boom")
                assert q.qsize() == 2 and q.unacked_count() == 0
                async with c.transaction():
                    with pytest.raises(ackqueue.TransactionError):
                        async with c.transaction():
                            pass

    asyncio.run(main())
    assert stored(qpath) == ["link1", "link2"]


def test_a_task_started_inside_a_transaction_leaves_it_when_the_block_ends(qpath):
    """A task started inside a block inherits it (a gather of puts joins the block), and kept
    it after the block ended: its later put ran on the block's lane, by then lent to another
    task's transaction, and vanished when that one rolled back, though the put had returned
    (a review: 10 runs of 10). Once the block ends, such a task is in no transaction."""

    async def main() -> None:
        async with AsyncAckQueue(qpath, threads=1) as q:  # one lane: the next block gets it
            go = asyncio.Event()

            async def background() -> None:
                await go.wait()
                await q.put("from the background")
                async with q.transaction():  # and it may open a block of its own
                    await q.put("a block of its own")

            async with q.transaction():
                await asyncio.gather(q.put("in the block"), q.put("gathered in the block"))
                task = asyncio.create_task(background())
            with pytest.raises(RuntimeError):
                async with q.transaction():
                    await q.put("rolled back")
                    go.set()
                    await asyncio.sleep(0.2)  # the background put runs meanwhile
                    raise RuntimeError("this block fails")
            await task

    asyncio.run(main())
    assert sorted(stored(qpath)) == sorted(
        ["in the block", "gathered in the block", "from the background", "a block of its own"]
    )


def test_a_put_wakes_one_waiter_and_shutdown_wakes_all(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            getters = [asyncio.create_task(q.get()) for _ in range(5)]
            await wait_for_waiters(q, 5)
            await q.put("one")
            done, pending = await asyncio.wait(getters, return_when=asyncio.FIRST_COMPLETED)
            assert [t.result() for t in done] == ["one"]
            await wait_for_waiters(q, 4)  # the others wait on
            await q.shutdown()
            results = await asyncio.gather(*pending, return_exceptions=True)
            assert all(isinstance(r, ackqueue.ShutDown) for r in results)

    asyncio.run(main())


def test_queue_made_outside_a_loop_serves_several_loops_in_turn(qpath):
    q: AsyncAckQueue[int] = AsyncAckQueue(qpath)
    try:
        asyncio.run(q.put(1))
        asyncio.run(q.put(2))
        assert asyncio.run(q.get()) == 1
    finally:
        q.close_now()
    assert stored(qpath) == [2]


def test_maxsize_back_pressure_and_forwarded_pause(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath, maxsize=2) as q:
            await q.put_many([1, 2])
            blocked = asyncio.create_task(q.put(3))  # waits for room on a thread of the loop's
            await eventually(lambda: q.sync.not_full._waiters, 60, "the put blocked for room")
            assert not blocked.done() and q.full()
            assert await q.get() == 1
            await asyncio.wait_for(blocked, 10)
            await q.pause()  # a method the async queue does not name: forwarded, awaited
            assert q.paused
            with pytest.raises(ackqueue.Empty):
                await q.get(timeout=0.05)
            waiting = asyncio.create_task(q.get())
            await wait_for_waiters(q, 1)
            await q.resume()
            assert await asyncio.wait_for(waiting, 10) == 2

    asyncio.run(main())
    assert stored(qpath) == [3]


def test_a_join_cancelled_while_the_queue_stays_open_lets_the_loop_end(tmp_path):
    """The join's thread waits in slices and stops once its join is cancelled, though the
    queue stays open and nothing wakes it (a close would): ``asyncio.run`` then ends (it waits
    for every thread of the loop's executor). Closed after the loop, the item is still there."""
    opened: list[AsyncAckQueue[str]] = []

    async def main() -> None:
        q = AsyncAckQueue(str(tmp_path / "q.fs"))
        opened.append(q)
        await q.put("never done")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(q.join(), 0.2)

    try:
        run_ends(main, 20, "asyncio.run() did not end: a cancelled join's thread still waits")
        assert not opened[0].sync.closed and opened[0].sync.qsize() == 1
    finally:
        if opened:
            opened[0].sync.close()  # wakes a join's thread left waiting, so the test can end


def test_a_cancelled_join_leaves_no_thread_waiting(tmp_path):
    """``asyncio.wait_for(q.join(), t)`` with an item never done: the join raises TimeoutError
    and its thread stops waiting, so ``asyncio.run`` can end (it waits for the loop's
    threads: the join's used to wait for ever). A join the queue's close ends raises
    QueueClosedError."""
    outcome: list[str] = []

    async def main() -> None:
        q = AsyncAckQueue(str(tmp_path / "q.fs"))
        await q.put("never done")
        with pytest.raises(asyncio.TimeoutError):  # not the builtin before 3.11
            await asyncio.wait_for(q.join(), 0.3)
        joining = asyncio.create_task(q.join())
        await asyncio.sleep(0.1)
        await q.aclose()
        with pytest.raises(ackqueue.QueueClosedError):
            await asyncio.wait_for(joining, 10)
        outcome.append("done")

    run_ends(main, 30, "asyncio.run() did not end: a join's thread still waits")
    assert outcome == ["done"]
