"""Cancellation at every await point of get, ack and transaction loses nothing.

A task is cancelled after ``steps`` turns of the event loop (hypothesis picks them), wherever
it is then: waiting for an item, taking it on a thread, committing an ack or a transaction.
Afterwards the file must hold exactly what the operations that finished left there: an item
is acked or still there (ready or held), never lost and never doubled. Three ways a take
runs: on the loop (single process), on a thread (``max_attempts`` counts deliveries durably),
and shared mode (a stored hold).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from typing import Any

import pytest
from aiohelp import eventually, run_ends, stored
from hypothesis import given, settings
from hypothesis import strategies as st
from polling import bounded

from ackqueue import AsyncAckQueue

STEPS = st.integers(min_value=0, max_value=40)
OPTIONS: dict[str, dict[str, Any]] = {
    "loop": {},
    "thread": {"max_attempts": 50},
}


async def cancel_after(task: asyncio.Task[Any], steps: int) -> None:
    for _ in range(steps):
        if task.done():
            return
        await asyncio.sleep(0)
    task.cancel()
    [failure] = await asyncio.gather(task, return_exceptions=True)
    assert not isinstance(failure, AssertionError), failure


def consumer_get_cancelled(path: str, steps: int, put_first: bool, options: dict[str, Any]
                           ) -> None:
    got: list[str] = []
    outcome: list[str] = []

    async def owner(q: AsyncAckQueue[str]) -> None:
        c = q.connect()
        try:
            got.append(await c.get())
            outcome.append("got")
        except asyncio.CancelledError:
            # The consumer lives on: the cancelled get itself gave back what it took.
            await eventually(lambda: not c.deliveries(), 3, "the cancelled get's give-back")
            outcome.append("cancelled")
        assert len(c.deliveries()) == len(got)
        await c.close()

    async def main() -> None:
        async with AsyncAckQueue(path, **options) as q:
            if put_first:
                await q.put("item")
            task = asyncio.create_task(owner(q))
            if not put_first:
                await asyncio.sleep(0)
                await q.put("item")
            await cancel_after(task, steps)
            await eventually(lambda: q.unacked_count() == 0 and q.qsize() == 1)

    asyncio.run(main())
    assert stored(path, bool(options.get("shared"))) == ["item"]


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, put_first=st.booleans(), how=st.sampled_from(sorted(OPTIONS)))
def test_a_cancelled_consumer_get_takes_nothing(steps, put_first, how):
    with tempfile.TemporaryDirectory() as d:
        consumer_get_cancelled(os.path.join(d, "q.fs"), steps, put_first, OPTIONS[how])


def ack_cancelled(path: str, steps: int, options: dict[str, Any]) -> None:
    async def owner(q: AsyncAckQueue[str]) -> None:
        async with q.connect() as c:
            item = await c.get()
            try:
                await c.ack(item)
            except asyncio.CancelledError:
                # Acked, or still held: never neither. Wait for the ack's thread to finish.
                await eventually(lambda: q.unacked_count() == 0 or c.deliveries(),
                                 what="the ack to finish")
                await eventually(lambda: not c.deliveries() or q.unacked_count() == 1)
                raise

    async def main() -> None:
        async with AsyncAckQueue(path, **options) as q:
            await q.put_many(["item", "other"])
            task = asyncio.create_task(owner(q))
            await cancel_after(task, steps)
            await eventually(lambda: q.unacked_count() == 0, what="the task's give-back")

    asyncio.run(main())
    assert stored(path, bool(options.get("shared"))) in (["other"], ["item", "other"])


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, how=st.sampled_from(sorted(OPTIONS)))
def test_a_cancelled_ack_leaves_the_item_acked_or_held(steps, how):
    with tempfile.TemporaryDirectory() as d:
        ack_cancelled(os.path.join(d, "q.fs"), steps, OPTIONS[how])


def transaction_cancelled(path: str, steps: int, options: dict[str, Any]) -> None:
    async def owner(q: AsyncAckQueue[str]) -> None:
        async with q.connect() as c, c.transaction():
            page = await c.get()
            await q.put_many(["link1", "link2"])
            await c.ack(page)

    async def main() -> None:
        async with AsyncAckQueue(path, **options) as q:
            await q.put("page")
            task = asyncio.create_task(owner(q))
            await cancel_after(task, steps)
            await eventually(lambda: q.unacked_count() == 0, what="the task's give-back")

    asyncio.run(main())
    assert stored(path, bool(options.get("shared"))) in (["page"], ["link1", "link2"])


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, how=st.sampled_from(sorted(OPTIONS)))
def test_a_cancelled_transaction_commits_all_or_nothing(steps, how):
    with tempfile.TemporaryDirectory() as d:
        transaction_cancelled(os.path.join(d, "q.fs"), steps, OPTIONS[how])


def bounded_put_cancelled(path: str, steps: int, free_after: int | None, many: bool,
                          maxsize: int = 1) -> None:
    """A put on a full bounded queue (or, with ``maxsize`` 0, an unbounded one), cancelled
    after ``steps`` turns while room frees after ``free_after`` turns (None: only after the
    cancel): the item is stored if and only if the put returned (asyncio.wait_for(q.put(x),
    t) is how a put gets a timeout; its caller then puts again, so a cancelled put that
    stored later would double the item)."""
    returned: list[bool] = []

    async def owner(q: AsyncAckQueue[str]) -> None:
        if many:
            await q.put_many(["second"])
        else:
            await q.put("second")
        returned.append(True)  # before the next await, where a late cancellation arrives
        await asyncio.sleep(0)

    async def free_room(q: AsyncAckQueue[str]) -> None:
        async with q.connect() as c:
            first = await c.get(timeout=10)
            assert first == "first"
            await c.ack(first)

    async def main() -> None:
        async with AsyncAckQueue(path, maxsize=maxsize) as q:
            await q.put("first")
            task = asyncio.create_task(owner(q))
            freeing = None
            if free_after is not None:
                freeing = asyncio.create_task(after(free_after, free_room(q)))
            await cancel_after(task, steps)
            await (freeing if freeing is not None else free_room(q))
            await asyncio.sleep(0.2)  # a put still waiting on a thread would land now

    asyncio.run(main())
    assert stored(path) == (["second"] if returned else []), returned


async def after(steps: int, then: Any) -> None:
    for _ in range(steps):
        await asyncio.sleep(0)
    await then


@settings(max_examples=40, deadline=None)
@given(
    steps=STEPS,
    free_after=st.none() | st.integers(min_value=0, max_value=40),
    many=st.booleans(),
    maxsize=st.sampled_from([0, 1]),
)
def test_a_cancelled_put_stores_the_item_only_if_it_returned(steps, free_after, many, maxsize):
    with tempfile.TemporaryDirectory() as d:
        bounded_put_cancelled(os.path.join(d, "q.fs"), steps, free_after, many, maxsize)


def test_a_put_waiting_for_room_keeps_its_own_timeout(tmp_path):
    """The put waits for room in slices, so that a cancellation stops it: its ``timeout`` and
    ``block`` still mean what they mean for ``AckQueue.put``."""
    import time

    from ackqueue import Full

    async def main() -> None:
        async with AsyncAckQueue(str(tmp_path / "q.fs"), maxsize=1) as q:
            await q.put("first")
            start = time.monotonic()
            with pytest.raises(Full):
                await q.put("second", timeout=0.3)
            assert 0.27 <= time.monotonic() - start < 5
            start = time.monotonic()
            with pytest.raises(Full):
                await q.put_many(["second"], block=False)
            assert time.monotonic() - start < 1
            with pytest.raises(ValueError, match="non-negative"):
                await q.put("second", timeout=-1)
            landed = asyncio.create_task(q.put("second", timeout=30))
            await asyncio.sleep(0.2)
            async with q.connect() as c:
                await c.ack(await c.get())
            await asyncio.wait_for(landed, 10)
            assert q.qsize() == 1

    asyncio.run(main())


def plain_get_cancelled(path: str, steps: int, options: dict[str, Any]) -> None:
    got: list[str] = []

    async def taker(q: AsyncAckQueue[str]) -> None:
        got.append(await q.get())
        await asyncio.sleep(0)  # where a cancellation that came too late arrives

    async def main() -> None:
        async with AsyncAckQueue(path, **options) as q:
            await q.put("item")
            task = asyncio.create_task(taker(q))
            await cancel_after(task, steps)

    asyncio.run(main())
    # Removed for good only if the get handed it over; never dropped unseen.
    assert stored(path, bool(options.get("shared"))) == ([] if got else ["item"])


@settings(max_examples=30, deadline=None)
@given(steps=STEPS, how=st.sampled_from(sorted(OPTIONS)))
def test_a_cancelled_plain_get_takes_nothing_or_hands_the_item_over(steps, how):
    with tempfile.TemporaryDirectory() as d:
        plain_get_cancelled(os.path.join(d, "q.fs"), steps, OPTIONS[how])


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 5, 8, 13, 30])
def test_cancellation_in_shared_mode(tmp_path, steps):
    shared = {"shared": True, "session_timeout": 5}
    consumer_get_cancelled(str(tmp_path / "g.fs"), steps, True, shared)
    ack_cancelled(str(tmp_path / "a.fs"), steps, shared)
    transaction_cancelled(str(tmp_path / "t.fs"), steps, shared)


def cancel_between_take_and_hand_over(path: str, options: dict[str, Any]) -> bool:
    """Cancel a get once its take has finished on its thread; whether the task had not
    resumed with the item yet (the case this is after)."""
    got: list[str] = []

    async def owner(q: AsyncAckQueue[str]) -> None:
        c = q.connect()
        try:
            got.append(await c.get())
        except asyncio.CancelledError:
            await eventually(lambda: not c.deliveries(), 3, "the give-back")
        await c.close()

    async def main() -> bool:
        async with AsyncAckQueue(path, **options) as q:
            await q.put("item")
            task = asyncio.create_task(owner(q))
            for _ in bounded(10_000_000, "waiting for the take"):
                if q.unacked_count():  # the take has happened
                    break
                await asyncio.sleep(0)
            caught_in_between = not got
            task.cancel()
            [failure] = await asyncio.gather(task, return_exceptions=True)
            assert not isinstance(failure, AssertionError), failure
            await eventually(lambda: q.unacked_count() == 0 and q.qsize() == 1)
            return caught_in_between

    return asyncio.run(main())


def test_a_take_that_finishes_on_its_thread_after_the_cancel_is_given_back(tmp_path):
    landed = 0
    for attempt in range(20):
        path = str(tmp_path / f"q{attempt}.fs")
        landed += cancel_between_take_and_hand_over(path, OPTIONS["thread"])
        assert stored(path) == ["item"]
    assert landed, "the cancellation never fell between the take and the hand-over"


def test_a_transaction_cancelled_while_its_put_waits_for_room_rolls_back(tmp_path):
    """A put inside ``async with q.transaction()`` waits for room on the transaction's own
    thread; cancelled there (``asyncio.wait_for``), it stops waiting, so the rollback can run
    on that thread: the block stores nothing, and the loop ends (it hung for ever, the
    rollback queued behind a put that waited for room nobody would free)."""
    path = str(tmp_path / "q.fs")
    outcome: list[str] = []

    async def main() -> None:
        async with AsyncAckQueue(path, maxsize=2) as q:
            await q.put("first")

            async def block() -> None:
                async with q.transaction():
                    await q.put_many(["a"])  # the second place: staged at once
                    await q.put("second")  # no third: waits

            with pytest.raises(asyncio.TimeoutError):  # not the builtin before 3.11
                await asyncio.wait_for(block(), 0.3)
            outcome.append("rolled back")

    run_ends(main, 30, "the cancelled transaction never finished")
    assert outcome == ["rolled back"]
    assert stored(path) == ["first"]


def whole_task_cancelled(path: str, steps: int, what: str, options: dict[str, Any]) -> None:
    """The get or put is the task's whole body (``create_task(q.get())``, ``gather``): a
    cancellation that arrives while it commits has no later await to arrive at."""
    outcome: list[Any] = []

    async def main() -> None:
        async with AsyncAckQueue(path, **options) as q:
            if what == "get":
                await q.put("item")
                task = asyncio.create_task(q.get())
            else:
                task = asyncio.create_task(q.put("item"))
            for _ in range(steps):
                if task.done():
                    break
                await asyncio.sleep(0)
            task.cancel()
            [result] = await asyncio.gather(task, return_exceptions=True)
            outcome.append(result)

    asyncio.run(main())
    [result] = outcome
    left = stored(path, bool(options.get("shared")))
    if what == "get":
        # Handed over (the task's result), or still in the file: never removed unseen.
        assert left == ([] if result == "item" else ["item"]), result
    else:
        # Stored only if the put returned (a cancelled put is put again by its caller).
        assert left == (["item"] if result is None else []), result


@settings(max_examples=30, deadline=None)
@given(steps=STEPS, what=st.sampled_from(["get", "put"]), how=st.sampled_from(sorted(OPTIONS)))
def test_a_get_or_put_cancelled_as_its_tasks_last_step_keeps_its_outcome(steps, what, how):
    with tempfile.TemporaryDirectory() as d:
        whole_task_cancelled(os.path.join(d, "q.fs"), steps, what, OPTIONS[how])


def timed_out(path: str, seconds: float, what: str) -> None:
    """``asyncio.wait_for(q.get(), t)`` and ``wait_for(q.put(x), t)``, whose timeout falls
    while the removal or the put commits."""
    outcome: list[Any] = []

    async def main() -> None:
        async with AsyncAckQueue(path) as q:
            if what == "get":
                await q.put("item")
            try:
                call = q.get() if what == "get" else q.put("item")
                outcome.append(await asyncio.wait_for(call, seconds))
            except asyncio.TimeoutError:
                outcome.append("timeout")
            await asyncio.sleep(0.05)  # a cancellation delivered late would arrive here

    asyncio.run(main())
    [result] = outcome
    left = stored(path)
    if what == "get":
        assert left == ([] if result == "item" else ["item"]), result
    else:
        assert left == (["item"] if result is None else []), result


@pytest.mark.parametrize("what", ["get", "put"])
def test_a_get_or_put_whose_timeout_falls_while_it_commits_keeps_its_outcome(tmp_path, what):
    for i in range(40):
        timed_out(str(tmp_path / f"q{i}.fs"), i * 0.0002, what)


def test_a_loop_cancelled_while_its_get_commits_still_stops(tmp_path):
    """The other side: a task that goes on after the get (a worker's loop) still receives
    the cancellation, at its next await, with the item handed over first."""

    async def main() -> None:
        async with AsyncAckQueue(str(tmp_path / "q.fs")) as q:
            for steps in range(30):
                await q.put(steps)
                got: list[int] = []

                async def worker(got: list[int]) -> None:
                    while True:
                        got.append(await q.get())
                        await asyncio.sleep(0.01)

                task = asyncio.create_task(worker(got))
                for _ in range(steps):
                    await asyncio.sleep(0)
                task.cancel()
                [failure] = await asyncio.gather(task, return_exceptions=True)
                assert isinstance(failure, asyncio.CancelledError), failure
                while not got and q.qsize():  # not taken: take it here
                    got.append(await q.get())
                assert got == [steps]
                assert q.qsize() == 0

    asyncio.run(main())


@pytest.mark.parametrize("how", sorted(OPTIONS))
def test_a_take_in_a_transaction_that_times_out_is_given_back_though_the_block_commits(
    tmp_path, how
):
    """Inside a block, a cancelled take was left for the block's rollback to give back; but a
    ``wait_for`` timeout is caught and the block goes on to commit: the item stayed held by
    the consumer, never seen by the caller (a review: 8 runs of 40)."""

    async def once(path: str, seconds: float) -> None:
        async with AsyncAckQueue(path, **OPTIONS[how]) as q:
            await q.put("item")
            async with q.connect() as c:
                seen = None
                async with c.transaction():
                    with contextlib.suppress(asyncio.TimeoutError):
                        seen = await asyncio.wait_for(c.get(), seconds)
                    await q.put("the block's other work")
                held = [d.item for d in c.deliveries()]
                if seen is None:
                    assert held == [] and q.qsize() == 2, (held, q.qsize())
                else:
                    assert held == ["item"] and q.qsize() == 1, (held, q.qsize())
                    await c.ack(seen)

    for i in range(50):
        asyncio.run(once(str(tmp_path / f"q{i}.fs"), i * 0.00005))
