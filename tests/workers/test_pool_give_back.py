"""WorkerPool: what it gives back unstarted keeps its place and attempts (the give-back the
asyncio pool shares too), what runs is limited by the smaller of the two ``max_attempts``, a
run waits for groups held back by their rules, a handler's exception that cannot be printed is
still buried, and a stop() asked before run() is kept."""

import logging
import threading
import time

from polling import wait_until

import ackqueue
from ackqueue.workers.board import give_back_unstarted
from ackqueue.workers.pool import Retry, WorkerPool

FAST = Retry(base=0.01, factor=2.0, jitter=0.0)


def test_stopping_gives_back_prefetched_items_in_place_without_spending_an_attempt(qpath):
    """With ``max_attempts=1`` every prefetched item is at its last attempt: a plain nack of
    those the handler never ran sent them to the dead letters when the pool stopped."""
    entered, release = threading.Event(), threading.Event()
    handled = []

    def handler(item):
        handled.append(item)
        entered.set()
        assert release.wait(10)

    with ackqueue.AckQueue(qpath, max_attempts=1) as q:
        q.put_many(range(50))
        pool = WorkerPool(q, handler, threads=1, prefetch=20)
        runner = threading.Thread(target=pool.run)
        runner.start()
        assert entered.wait(10)
        wait_until(lambda: q.unacked_count() >= 10, 10, "the pool prefetching items")
        pool.stop()
        release.set()
        runner.join(10)
        assert not runner.is_alive()
        assert q.dead_letters() == []
        assert (pool.stats.done, q.qsize(), q.unacked_count()) == (1, 49, 0)
        with q.connect() as c:
            again = [c.get_nowait() for _ in range(49)]
            attempts = {c.delivery(item).attempts for item in again}
        assert again == sorted(set(range(50)) - set(handled))  # each in its place
        assert attempts == {1}  # the delivery that never ran did not count


def test_items_whose_lease_ran_out_in_the_buffer_are_given_back_without_spending_an_attempt(
    qpath,
):
    """The queue's clock stands still, so the leases the pool finds run out (by its own
    clock) are still held, and the pool gives those items back itself, unstarted."""
    clock = ackqueue.ManualClock()
    seen = []

    def handler(item):
        seen.append(item)
        if len(seen) == 1:
            time.sleep(0.3)  # the job itself: the others wait in the buffer past their lease

    with ackqueue.AckQueue(qpath, ack_timeout=0.2, max_attempts=1, clock=clock) as q:
        q.put_many(range(4))
        stats = WorkerPool(q, handler, threads=1, prefetch=4).run_until_empty()
        assert q.dead_letters() == []
        assert (q.qsize(), q.unacked_count()) == (0, 0)
    assert (stats.done, stats.dead) == (4, 0)
    assert sorted(seen) == list(range(4))


def test_a_handler_that_always_ends_its_worker_still_reaches_max_attempts(qpath):
    """Its item is given back counted (its handler ran), unlike an item no handler ran."""
    def handler(item):
        if item == "ends-its-worker":
            raise SystemExit("this worker thread ends here")

    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        q.put_many(["ends-its-worker", "a", "b"])
        stats = WorkerPool(q, handler, threads=3).run_until_empty()
        assert [letter.item for letter in q.dead_letters()] == ["ends-its-worker"]
    # Buried by the nack of its last attempt, which the queue makes: dead all the same.
    assert (stats.done, stats.dead, stats.stopped_by) == (2, 1, None)


def test_run_until_empty_waits_for_the_items_their_group_rules_hold_back(qpath):
    """qsize() leaves out what a group's cap or interval holds back: the run ended after the
    first item of each group."""
    handled = []
    with ackqueue.AckQueue(qpath, max_held_per_group=1, group_interval=0.1) as q:
        for n in range(6):
            q.put(("a", n), group="a")
            q.put(("b", n), group="b")
        stats = WorkerPool(q, handled.append, threads=4, poll=0.05).run_until_empty()
        assert (q.qsize(), q.unacked_count(), q.stored_count()) == (0, 0, 0)
    assert sorted(handled) == sorted((g, n) for g in "ab" for n in range(6))
    assert (stats.done, stats.stopped_by) == (12, None)


def test_a_retry_limit_above_the_queues_buries_at_the_queues_with_the_exception(qpath, caplog):
    calls = []

    def handler(item):
        calls.append(item)
        raise ValueError("cannot parse")

    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        q.put("poison")
        with caplog.at_level(logging.WARNING, logger="ackqueue"):
            pool = WorkerPool(q, handler, threads=1, retry=Retry(base=0.01, max_attempts=5))
            stats = pool.run_until_empty()
        [letter] = q.dead_letters()
    assert calls == ["poison", "poison"]
    assert (letter.attempts, letter.reason) == (2, "ValueError: cannot parse")
    assert (stats.failed, stats.dead, stats.stopped_by) == (2, 1, None)
    assert "Retry(max_attempts=5) is above the queue's max_attempts=2" in caplog.text


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str")


def test_an_exception_that_cannot_be_printed_is_buried_with_its_type(qpath):
    def handler(item):
        raise Unprintable()

    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        q.put_many(["x", "y"])
        stats = WorkerPool(q, handler, threads=1, retry=FAST).run_until_empty()
        letters = q.dead_letters()
        assert (q.qsize(), q.unacked_count()) == (0, 0)
    assert (stats.failed, stats.dead, stats.stopped_by) == (4, 2, None)
    assert {letter.reason for letter in letters} == {"Unprintable: <str() failed: RuntimeError>"}


def test_a_stop_before_run_ends_the_next_run_at_once_and_the_pool_runs_again_after(qpath):
    handled = []
    with ackqueue.AckQueue(qpath) as q:
        q.put_many(range(20))
        pool = WorkerPool(q, handled.append, threads=2)
        pool.stop()
        assert pool.stopping
        stats = pool.run_until_empty()
        assert (stats.stopped_by, stats.done, handled, q.qsize()) == ("stop()", 0, [], 20)
        stats = pool.run_until_empty()  # the stop was for one run only
        assert (stats.stopped_by, stats.done, q.qsize()) == (None, 20, 0)
        pool.stop()  # between runs: for the next one, run() included
        stats = pool.run()
        assert (stats.stopped_by, stats.done) == ("stop()", 0)  # each run counts its own
    assert sorted(handled) == list(range(20))


def test_giving_back_unstarted_items_keeps_their_place_and_attempts_and_skips_those_not_held(
    qpath,
):
    """The give-back both pools use (the asyncio one on a thread of its queue): one commit,
    each item ready again in its place, its delivery not counted; an item taken back
    meanwhile is skipped, not an error that would send the others one at a time."""
    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        q.put_many(range(4))
        with q.connect() as c:
            items = c.get_many(4)
            c.nack(items[1])  # no longer held when the pool gives the others back
            assert give_back_unstarted(c, items) is True
            assert q.unacked_count() == 0
            again = c.get_many(4)
            assert again == [0, 1, 2, 3]  # each in its place
            # Given back unstarted: the delivery did not count. The nacked one's did.
            assert [c.delivery(item).attempts for item in again] == [1, 2, 1, 1]
        assert q.dead_letters() == []


def test_giving_back_unstarted_items_says_so_when_nothing_committed(qpath):
    """A give-back that cannot commit (here it cannot even open its transaction: the thread
    is inside one) changes nothing and says so, and the pool settles each item on its own."""
    with ackqueue.AckQueue(qpath, max_attempts=1) as q:
        q.put_many(range(3))
        with q.connect() as c:
            items = c.get_many(3)
            with q.transaction():
                assert give_back_unstarted(c, items) is False
            assert q.unacked_count() == 3
    with ackqueue.AckQueue(qpath, max_attempts=1) as q:
        assert q.qsize() == 3  # given back when the consumer closed
