"""Tasks and threads on one queue; what a task holds goes back when it ends; bad input."""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest
from aiohelp import eventually, stored, wait_for_waiters

import ackqueue
from ackqueue import AsyncAckQueue, AsyncUsageError
from ackqueue.aio.queues import THREADS


def test_a_task_that_ends_holding_items_gives_them_back(qpath):
    async def holder(q: AsyncAckQueue[str], fail: bool) -> None:
        c = q.connect()  # never closed: the task's end is what gives its items back
        await c.get()
        await c.get()
        if fail:
            raise ValueError("handler crashed")

    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(["a", "b", "c", "d"])
            await asyncio.create_task(holder(q, False))
            await eventually(lambda: q.unacked_count() == 0, what="the ended task's give-back")
            assert q.qsize() == 4
            with pytest.raises(ValueError):
                await asyncio.create_task(holder(q, True))
            await eventually(lambda: q.unacked_count() == 0, what="the failed task's give-back")
            async with q.connect() as c:
                assert await c.get_many(4) == ["a", "b", "c", "d"]  # in their places

    asyncio.run(main())


def test_one_thousand_waiting_gets_hold_no_threads(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            before = threading.active_count()
            getters = [asyncio.create_task(q.get()) for _ in range(1000)]
            await wait_for_waiters(q, 1000)
            # The queue's own bounded pool at most, not a thread per waiter.
            assert threading.active_count() <= before + THREADS
            await q.put_many(range(1000))
            assert sorted(await asyncio.gather(*getters)) == list(range(1000))

    asyncio.run(main())


def test_thread_producers_and_async_consumers_share_one_file(qpath):
    n_threads, per_thread = 4, 250

    async def main() -> list[int]:
        async with AsyncAckQueue(qpath) as q:
            def produce(base: int) -> None:
                for i in range(per_thread):
                    q.sync.put(base + i)

            threads = [
                threading.Thread(target=produce, args=(t * 10_000,)) for t in range(n_threads)
            ]
            got: list[int] = []

            async def consume() -> None:
                async with q.connect() as c:
                    while len(got) < n_threads * per_thread:
                        try:
                            item = await c.get(timeout=0.2)
                        except ackqueue.Empty:
                            continue
                        # Counted once acked: the tasks are cancelled when every item is
                        # counted, and one cancelled inside its last ack left that item
                        # stored (CI, Python 3.13: a stored item after the run).
                        await c.ack(item)
                        got.append(item)

            consumers = [asyncio.create_task(consume()) for _ in range(8)]
            for t in threads:
                t.start()
            # A thread consumer too, on the same queue.
            thread_got: list[int] = []

            def thread_consumer() -> None:
                with q.sync.connect() as c:
                    for _ in range(50):
                        item = c.get(timeout=10)
                        thread_got.append(item)
                        c.ack(item)

            tc = threading.Thread(target=thread_consumer)
            tc.start()
            await eventually(lambda: len(got) + len(thread_got) >= n_threads * per_thread,
                             timeout=60, what="every item consumed")
            for task in consumers:
                task.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
            for t in [*threads, tc]:
                t.join()
            return got + thread_got

    everything = asyncio.run(main())
    expected = [t * 10_000 + i for t in range(n_threads) for i in range(per_thread)]
    assert sorted(everything) == expected
    assert stored(qpath) == []


def test_blocking_get_on_the_loops_thread_is_refused_and_takes_nothing(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put("x")
            with pytest.raises(AsyncUsageError, match="await q.get"):
                q.sync.get()
            with q.sync.connect() as c, pytest.raises(AsyncUsageError):
                c.get(timeout=1)
            assert q.qsize() == 1
            assert q.sync.get_nowait() == "x"  # not blocking: allowed
            await asyncio.get_running_loop().run_in_executor(None, q.sync.put, "y")
            assert await asyncio.get_running_loop().run_in_executor(None, q.sync.get) == "y"

    asyncio.run(main())


CONSUMER_KINDS = [
    pytest.param({}, {}, id="takes-on-the-loop"),
    pytest.param({}, {"takes_on_threads": True}, id="takes-on-threads"),
    pytest.param({"max_attempts": 3}, {}, id="durable-delivery-counts"),
]


@pytest.mark.parametrize(("queue_options", "connect_options"), CONSUMER_KINDS)
def test_gets_from_tasks_the_owner_starts_are_held_by_the_consumer(
    qpath, queue_options, connect_options
):
    """wait_for (a task of its own on 3.10 and 3.11), ensure_future and gather get with the
    owner's consumer; what they get goes back when the owning task ends, not theirs."""

    async def owner(q: AsyncAckQueue[str], got: list[str]) -> None:
        c = q.connect(**connect_options)  # never closed: the owner's end gives back
        got.append(await asyncio.wait_for(c.get(), 5))
        got.append(await asyncio.ensure_future(c.get()))
        got.extend(await asyncio.gather(c.get(), c.get()))
        got.extend(*await asyncio.gather(c.get_many(2)))
        acked = got[0]
        await asyncio.create_task(c.ack(acked))  # acks from any task, as before
        assert q.unacked_count() == 5
        assert {task for task, _, _ in q.held()} == {asyncio.current_task().get_name()}

    async def main() -> list[str]:
        async with AsyncAckQueue(qpath, **queue_options) as q:
            await q.put_many(list("abcdefg"))
            got: list[str] = []
            await asyncio.create_task(owner(q, got), name="the-owner")
            assert sorted(got) == list("abcdef")
            await eventually(lambda: q.unacked_count() == 0, what="the owner's give-back")
            assert q.qsize() == 6
            async with q.connect() as c:
                return await c.get_many(6)

    assert asyncio.run(main()) == list("bcdefg")  # given back in their places


def test_closing_a_consumer_gives_back_what_its_child_tasks_got(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put_many(["a", "b", "c"])
            c = q.connect()

            async def child() -> str:
                return await c.get()  # this task ends holding nothing: the item is c's

            assert await asyncio.create_task(child()) == "a"
            assert q.unacked_count() == 1  # the child's end gave nothing back
            assert await c.get() == "b"
            await c.close()
            assert q.unacked_count() == 0 and q.qsize() == 3
            with pytest.raises(ackqueue.QueueClosedError):
                await asyncio.create_task(child())

    asyncio.run(main())
    assert stored(qpath) == ["a", "b", "c"]


def test_a_plain_with_on_async_objects_says_async_with(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put("x")
            for plain_with, spelled in [
                (q.connect, r"async with q\.connect\(\) as c:"),
                (q.transaction, r"async with q\.transaction\(\):"),
                (lambda: q, r"async with AsyncAckQueue\(\.\.\.\) as q:"),
            ]:
                with pytest.raises(AsyncUsageError, match=spelled), plain_with():
                    pass
            assert q.qsize() == 1 and q.unacked_count() == 0

    asyncio.run(main())


def test_a_plain_queues_blocking_get_in_a_coroutine_warns_once_naming_the_callers_line(qpath):
    async def main() -> list[int]:
        q: ackqueue.AckQueue[int] = ackqueue.AckQueue(qpath)
        try:
            q.put_many([1, 2, 3])
            with pytest.warns(RuntimeWarning, match="stops every task") as caught:
                got = [q.get(), q.get(timeout=1)]
            assert len(caught) == 1
            assert caught[0].filename == __file__
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got.append(q.get_nowait())  # does not block: no warning
            return got
        finally:
            q.close()

    assert asyncio.run(main()) == [1, 2, 3]


def test_a_consumer_used_on_another_loop_raises_and_changes_nothing(qpath):
    q: AsyncAckQueue[str] = AsyncAckQueue(qpath)
    try:
        asyncio.run(q.put_many(["a", "b"]))
        holder: list[ackqueue.AsyncConsumer[str]] = []
        got: list[str] = []

        async def connect_and_get() -> None:
            c = q.connect()
            holder.append(c)
            got.append(await c.get())
            # the task ends: what it held goes back

        asyncio.run(connect_and_get())

        async def use_elsewhere() -> None:
            with pytest.raises(AsyncUsageError, match="another"):
                await holder[0].get()
            with pytest.raises(AsyncUsageError, match="another"):
                await holder[0].ack(got[0])

        asyncio.run(use_elsewhere())
        with pytest.raises(AsyncUsageError, match="inside a coroutine|running event loop"):
            q.connect()
    finally:
        q.close_now()
    assert stored(qpath) == ["a", "b"]


def test_held_and_errors_name_the_task_holding_an_item_not_the_loops_thread(qpath):
    async def holder(q: AsyncAckQueue[str], got: asyncio.Event, done: asyncio.Event) -> str:
        c = q.connect()
        item = await c.get()
        got.set()
        await done.wait()
        await c.ack(item)
        return item

    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            await q.put("job")
            got, done = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(holder(q, got, done), name="fetch-7")
            await got.wait()
            assert [owner for owner, _delivery, _age in q.held()] == ["fetch-7"]
            async with q.connect() as other:
                with pytest.raises(
                    ackqueue.NotHeldError, match=r"another consumer \(task 'fetch-7'\)"
                ):
                    await other.ack(q.held()[0][1].item)
            assert "task 'fetch-7'" in repr(q.sync.connect(task="fetch-7"))
            done.set()
            assert await task == "job"

    asyncio.run(main())
