"""How items leave the queue and what ``qsize`` and ``maxsize`` count meanwhile: how many a
``get_many`` takes and which, a get whose hook fails after it took the head, how long a get
with a timeout waits on an empty queue, puts still committing, paused groups.

Each test is small and fast on purpose: benchmarks/mutation.py runs this file for every
mutant of the claiming and delivery code (the rules these tests pin down had no fast test).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from conftest import drain
from polling import wait_for_waiter, wait_until
from semantic_helpers import put_in_flight

from ackqueue import (
    AckQueue,
    AckQueueError,
    AsyncAckQueue,
    AsyncUsageError,
    Empty,
    Full,
    QueueClosedError,
)


def test_get_many_takes_exactly_n_items_in_order_and_leaves_the_rest(qpath):
    with AckQueue(qpath) as q:
        q.put_many(range(10))
        c = q.connect()
        got = c.get_many(4)
        assert got == [0, 1, 2, 3]
        assert [c.delivery(x).attempts for x in got] == [1, 1, 1, 1]
        assert q.unacked_count() == 4 and q.qsize() == 6
        c.ack_many(got)
        assert c.get_many(100) == [4, 5, 6, 7, 8, 9]


class _GetFailsAfterTheClaim(AckQueue[Any]):
    """A subclass whose ``_get`` hook fails once the base hook has taken the head (as a
    subclass that checks or converts the item might)."""

    failing = True

    def _get(self) -> Any:
        item = super()._get()
        if self.failing:
            raise RuntimeError("the subclass refuses the item")
        return item


def test_a_get_that_fails_after_its_hook_took_the_head_gives_the_item_back_in_its_place(qpath):
    with _GetFailsAfterTheClaim(qpath) as q:
        q.put("first")
        q.put("second")
        with pytest.raises(RuntimeError, match="refuses"):
            q.get_nowait()
        assert q.qsize() == 2 and q.unacked_count() == 0
        q.failing = False
        assert [q.get_nowait(), q.get_nowait()] == ["first", "second"]


class _GetSkipsTheBaseHook(AckQueue[Any]):
    def _get(self) -> Any:
        return "made up"


def test_a_subclass_get_hook_that_skips_the_base_hook_is_a_clear_error(qpath):
    with _GetSkipsTheBaseHook(qpath) as q:
        q.put("stored")
        with pytest.raises(AckQueueError, match="^a subclass's _get did not call AckQueue._get$"):
            q.get_nowait()


def test_a_get_with_a_short_timeout_on_an_empty_queue_gives_up_after_that_timeout(qpath):
    with AckQueue(qpath) as q:
        c = q.connect()
        for getter in (q.get, c.get, lambda timeout: c.get_many(3, timeout=timeout)):
            start = time.monotonic()
            with pytest.raises(Empty):
                getter(timeout=0.01)
            # Waiting a whole second more than asked is not a timeout of 0.01 s.
            assert time.monotonic() - start < 0.9


def test_get_nowait_does_not_wait_for_a_put_still_committing(qpath):
    with AckQueue(qpath) as q, put_in_flight(q):
        start = time.monotonic()
        with pytest.raises(Empty):
            q.get_nowait()
        with pytest.raises(Empty):
            q.connect().get_nowait()
        # The put's commit is held for 30 s: waiting for it would take that long.
        assert time.monotonic() - start < 10


def test_get_with_timeout_keeps_its_timeout_while_a_put_is_committing(qpath):
    with AckQueue(qpath) as q, put_in_flight(q):
        start = time.monotonic()
        with pytest.raises(Empty):
            q.get(timeout=0.2)
        assert 0.19 <= time.monotonic() - start < 10  # not the 30 s the commit is held


def test_of_two_gets_waiting_for_one_committing_put_one_gets_it_and_the_other_waits_on(qpath):
    with AckQueue(qpath) as q:
        got: list[object] = []
        getters = [threading.Thread(target=lambda: got.append(q.get())) for _ in range(2)]
        with put_in_flight(q):
            for getter in getters:
                getter.start()
            # Both wait for that put to land (it counted in qsize when they looked).
            wait_until(lambda: len(q._signals.landed._waiters) == 2)
        wait_until(lambda: got == ["in flight"])
        q.put("next")
        for getter in getters:
            getter.join(30)
        assert got == ["in flight", "next"]


def test_a_put_still_committing_counts_in_qsize_and_against_maxsize(qpath):
    with AckQueue(qpath, maxsize=2) as q:
        q.put("landed")
        with put_in_flight(q):
            assert q.qsize() == 2 and q.full()
            with pytest.raises(Full):
                q.put_nowait("third")
        assert drain(q) == ["landed", "in flight"]


def test_an_immediate_shutdown_forgets_a_put_still_committing_and_storage_keeps_it(qpath):
    with AckQueue(qpath) as q:
        q.put("landed")
        with put_in_flight(q):
            q.shutdown(immediate=True)
            assert q.qsize() == 0 and q.empty()  # as queue.Queue's shutdown(immediate=True)
        assert q.qsize() == 0
    with AckQueue(qpath) as q:
        assert drain(q) == ["landed", "in flight"]


def test_maxsize_counts_the_waiting_items_of_a_paused_group(qpath):
    # A paused group hands nothing out, yet its items wait in the queue: a put must not
    # overfill it (the back-pressure that maxsize promises).
    with AckQueue(qpath, maxsize=2) as q:
        q.put("a", group="host")
        q.put("b", group="host")
        q.pause_group("host", 60)
        assert q.qsize() == 0  # qsize counts what may be delivered now (docs/howto/crawler)
        with pytest.raises(Empty):
            q.get_nowait()
        with pytest.raises(Full):
            q.put_nowait("c")
        q.pause_group("host", 0)
        assert q.get_nowait() == "a"
        q.put_nowait("c")
        assert drain(q) == ["b", "c"]


def test_metrics_count_plain_gets_and_not_consumer_gets(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["plain", "plain too", "held"])
        assert [q.get(), q.get()] == ["plain", "plain too"]
        c = q.connect()
        assert c.get() == "held"
        assert q.metrics().gets == 2


def test_closing_a_consumer_wakes_its_blocked_get_with_an_error_that_says_so(qpath):
    with AckQueue(qpath) as q:
        raised: list[BaseException] = []

        def get() -> None:
            c = q.connect()
            closer = threading.Thread(target=lambda: (wait_for_waiter(q.not_empty), c.close()))
            closer.start()
            try:
                c.get(timeout=30)
            except QueueClosedError as exc:
                raised.append(exc)
            closer.join(30)

        getter = threading.Thread(target=get)
        getter.start()
        getter.join(30)
        assert [str(exc) for exc in raised] == [
            "this consumer was closed while its get was waiting"
        ]


def test_a_blocking_get_on_an_event_loops_thread_is_refused_with_what_it_was(qpath):
    async def main() -> None:
        async with AsyncAckQueue(qpath) as q:
            with pytest.raises(AsyncUsageError, match="^a blocking get would block the event"):
                q.sync.get(timeout=5)

    asyncio.run(main())


def test_put_many_fills_an_empty_queue_up_to_maxsize(qpath):
    with AckQueue(qpath, maxsize=3) as q:
        q.put_many([1, 2, 3], block=False)
        assert q.full()
        with pytest.raises(Full):
            q.put_many([4], block=False)


def test_put_many_counts_puts_still_committing_and_puts_of_an_open_transaction(qpath):
    with AckQueue(qpath, maxsize=2) as q:
        with put_in_flight(q), pytest.raises(Full):
            q.put_many(["a", "b"], block=False)
        q.get_nowait()
        with q.transaction():
            q.put("in the transaction")
            with pytest.raises(Full):
                q.put_many(["a", "b"], block=False)
        assert drain(q) == ["in the transaction"]


def test_a_put_by_key_that_replaces_a_waiting_item_hands_out_the_new_payload(qpath):
    with AckQueue(qpath) as q:
        q.put("old", key="k")  # its pickle is kept for the get (this session's put)
        assert q.put("new", key="k", replace=True) is True
        q.put("old later", key="later", delay=3600)
        assert q.put("new later", key="later", replace=True) is True  # delayed ones too
        assert q.delayed_count() == 1
        q.remove("later")
        assert q.delayed_count() == 0 and q.stored_count() == 1
        assert drain(q) == ["new"]


def test_an_item_due_in_the_past_is_ready_when_its_put_returns(qpath):
    with AckQueue(qpath) as q:
        q.put("overdue", not_before=time.time() - 60)
        assert q.delayed_count() == 0 and q.qsize() == 1
        assert q.get_nowait() == "overdue"
