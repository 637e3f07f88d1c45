"""What settling a held item does to the queue: ack, nack (plain, delayed, with a new payload),
reject and running out of attempts; inside a transaction; and a consumer dropped while it holds.

Each test checks the counts a user sees (``qsize``, ``unacked_count``, ``delayed_count``,
``unfinished_tasks`` for ``join``, ``metrics()``, the dead letters) and what a reopen finds.
They are fast on purpose: benchmarks/mutation.py runs them for every mutant of the delivery
code.
"""

from __future__ import annotations

import gc
import time

import pytest

from ackqueue import AckQueue, Empty, NotHeldError


class Boom(Exception):
    pass


def test_acks_finish_their_items_for_join_and_count_in_the_metrics(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b", "c", "d"])
        held = c.get_many(4)
        c.ack_many(held[:3])
        c.ack(held[3])
        assert q.unfinished_tasks == 0 and q.unacked_count() == 0
        m = q.metrics()
        assert (m.acks, m.nacks, m.dead_lettered) == (4, 0, 0)
        assert 0 <= m.ack_latency_sum < 60
        q.join()  # returns: every item is done


def test_a_plain_nack_gives_the_item_back_in_place_without_a_commit(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        a = c.get()
        commits = q._store.commits
        c.nack(a)
        assert q._store.commits == commits  # nothing stored changes: holds live in memory
        assert (q.qsize(), q.delayed_count(), q.unfinished_tasks) == (2, 0, 2)
        assert q.metrics().nacks == 1
        assert [c.get_nowait(), c.get_nowait()] == ["a", "b"]


def test_a_delayed_nack_keeps_the_item_out_until_then_also_after_a_reopen(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        c.nack(c.get(), delay=3600)
        assert (q.qsize(), q.delayed_count(), q.unfinished_tasks) == (1, 1, 2)
        assert c.get_nowait() == "b"
        with pytest.raises(Empty):
            c.get_nowait()
    with AckQueue(qpath) as q:
        assert (q.qsize(), q.delayed_count()) == (1, 1)
        assert q.get_nowait() == "b"


def test_a_nack_with_a_new_payload_hands_that_out_now_and_after_a_reopen(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        c.nack(c.get(), replace="a2")
        assert q.qsize() == 2 and q.unacked_count() == 0
        again = c.get()
        assert again == "a2"
        c.nack(again, replace="a3")
    with AckQueue(qpath) as q:
        assert [q.get_nowait(), q.get_nowait()] == ["a3", "b"]


def test_reject_stores_the_reason_given_or_says_rejected(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        c.reject(c.get(), reason="malformed")
        c.reject(c.get())
        letters = q.dead_letters()
        assert [d.reason for d in letters] == ["malformed", "rejected"]
        assert all(abs(d.when - time.time()) < 600 for d in letters)
        assert (q.unfinished_tasks, q.unacked_count(), q.metrics().dead_lettered) == (0, 0, 2)


def test_max_attempts_allows_that_many_deliveries_then_dead_letters_the_item(qpath):
    with AckQueue(qpath, max_attempts=2) as q, q.connect() as c:
        q.put("poison")
        c.nack(c.get())  # delivery 1 of 2
        again = c.get()
        assert c.delivery(again).attempts == 2
        c.nack(again)  # delivery 2 of 2: out of attempts
        assert q.qsize() == 0 and q.unfinished_tasks == 0
        [letter] = q.dead_letters()
        assert letter.reason == "delivered 2 times without an ack (max_attempts)"
        assert letter.attempts == 2


def test_an_item_out_of_attempts_at_reopen_goes_to_the_dead_letters_at_its_next_get(qpath):
    # Delivered max_attempts times and never settled (its process died, say): the next get
    # buries it instead of handing it out, and join() does not wait for it.
    with AckQueue(qpath, max_attempts=1) as q:
        q.put_many(["poison", "poison too"])
        q.connect().get_many(2)
    with AckQueue(qpath, max_attempts=1) as q, q.connect() as c:
        q.put_many(["a", "b", "c"])
        fine = c.get_many(3)  # the two it buried first are made up for
        assert fine == ["a", "b", "c"] and q.dead_count() == 2
        c.ack_many(fine)
        assert q.unfinished_tasks == 0 and q.metrics().dead_lettered == 2


def test_a_negative_timeout_is_refused_as_by_queue_queue(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put("a")
        for get in (q.get, c.get, lambda timeout: c.get_many(2, timeout=timeout)):
            with pytest.raises(ValueError, match="non-negative"):
                get(timeout=-1)
        assert q.qsize() == 1


def test_a_rolled_back_transaction_gives_its_gets_back_and_keeps_its_acks_undone(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        with pytest.raises(Boom), c.transaction():
            c.get()
            raise Boom
        assert (q.qsize(), q.unacked_count()) == (2, 0)
        a = c.get()
        with pytest.raises(Boom), c.transaction():
            c.ack(a)
            raise Boom
        assert (q.qsize(), q.unacked_count()) == (1, 1)
        with c.transaction():
            c.ack(a)
            b = c.get()
            c.nack(b, replace="b2")
        assert (q.qsize(), q.unacked_count(), q.unfinished_tasks) == (1, 0, 1)
        with pytest.raises(NotHeldError):
            c.ack(a)
    with AckQueue(qpath) as q:
        assert q.stored_count() == 1 and q.get_nowait() == "b2"


def test_a_consumer_dropped_while_holding_gives_its_items_back(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["a", "b"])
        c = q.connect()
        c.get_many(2)
        assert q.unacked_count() == 2
        del c
        gc.collect()
        assert (q.unacked_count(), q.qsize()) == (0, 2)
        assert [q.get_nowait(), q.get_nowait()] == ["a", "b"]


def test_get_many_takes_one_item_and_refuses_none(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put_many(["a", "b"])
        assert c.get_many(1) == ["a"]
        with pytest.raises(ValueError):
            c.get_many(0)


def test_a_snooze_of_no_time_makes_the_item_ready_at_once(qpath):
    with AckQueue(qpath) as q, q.connect() as c:
        q.put("a")
        c.snooze(c.get(), 0)
        assert q.delayed_count() == 0 and c.get_nowait() == "a"


@pytest.mark.parametrize("delayed_before", [False, True])
def test_a_snooze_of_no_time_leaves_nothing_waiting_in_shared_mode_either(
    tmp_path, delayed_before
):
    """A snooze of no time wrote the item into the stored delay index, due at once; in shared
    mode what is there counts as waiting until it is taken, so ``qsize()`` stayed one short
    (a pool's stop now gives its prefetched items back so). ``delayed_before``: got after a
    nack with a delay, whose index entry the snooze must not leave behind either."""
    with AckQueue(str(tmp_path / "q.fs"), shared=True) as q, q.connect() as c:
        q.put_many(["a", "b", "c"])
        item = c.get()
        if delayed_before:
            c.nack(item, delay=0.05)
            time.sleep(0.2)
            item = c.get(timeout=5)
        c.snooze(item, 0)
        assert (q.qsize(), q.delayed_count(), q.unacked_count()) == (3, 0, 0)
        again = [c.get(timeout=5) for _ in range(3)]
        assert again == ["a", "b", "c"]
        assert c.delivery(again[0]).attempts == (2 if delayed_before else 1)


def test_held_names_the_task_a_consumer_was_connected_for(qpath):
    with AckQueue(qpath) as q:
        q.put("a")
        c = q.connect(task="crawl-1")
        c.get()
        assert [owner for owner, _delivery, _age in q.held()] == ["crawl-1"]
        c.close()
