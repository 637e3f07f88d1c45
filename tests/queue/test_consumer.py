"""Consumers: what c.get() hands out stays held until c.ack() or c.nack(), by object or by id."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import drain
from polling import wait_for_waiter, wait_until

import ackqueue


def test_leaving_the_with_block_gives_back_what_is_held_in_place(qpath):
    with ackqueue.AckQueue(qpath) as q:
        for n in range(5):
            q.put(n)
        with q.connect() as c:
            first, second, third = c.get(), c.get(), c.get()
            c.ack(second)
            assert q.unacked_count() == 2
            assert q.qsize() == 2
        assert c.closed
        assert (q.qsize(), q.unacked_count()) == (4, 0)
        assert drain(q) == [first, third, 3, 4] == [0, 2, 3, 4]


def test_nack_puts_the_item_back_in_its_original_place(qpath):
    with ackqueue.AckQueue(qpath) as q:
        for item in "abcd":
            q.put(item)
        c = q.connect()
        a, b = c.get(), c.get()
        c.nack(b)
        c.nack(a)
        assert drain(q) == list("abcd")


def test_ack_removes_for_good_and_a_held_item_is_back_after_reopen(qpath):
    with ackqueue.AckQueue(qpath) as q:
        for item in ("acked", "held", "ready"):
            q.put(item)
        c = q.connect()
        c.ack(c.get())
        assert c.get() == "held"
    with ackqueue.AckQueue(qpath) as q:
        assert drain(q) == ["held", "ready"]


def test_two_held_equal_ints_are_settled_one_at_a_time(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put(5)
        q.put(5)
        q.put(6)
        c = q.connect()
        first, second = c.get(), c.get()
        assert first is second  # small ints are one shared object: identity alone cannot tell
        ids = [d.id for d in c.deliveries()]
        c.ack(5)
        assert q.unacked_count() == 1
        assert [d.id for d in c.deliveries()] == ids[1:]
        c.nack(5)
        assert (q.unacked_count(), q.qsize()) == (0, 2)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack(5)
        assert drain(q) == [5, 6]


def test_two_held_equal_objects_are_independent(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put({"job": 1})
        q.put({"job": 1})
        c = q.connect()
        first, second = c.get(), c.get()
        assert first == second and first is not second
        c.ack(second)
        assert [d.item for d in c.deliveries()] == [first]
        assert c.deliveries()[0].item is first
        c.nack(first)
        assert drain(q) == [{"job": 1}]


def test_delivery_ids_name_each_hand_out(qpath):
    with ackqueue.AckQueue(qpath) as q:
        for item in ("x", "y", "z"):
            q.put(item)
        c = q.connect()
        got = [c.get() for _ in range(3)]
        deliveries = c.deliveries()
        assert [d.item for d in deliveries] == got  # oldest first
        assert len({d.id for d in deliveries}) == 3
        assert all(d.attempts == 1 and d.got_at > 0 for d in deliveries)
        assert c.delivery(got[1]).id == deliveries[1].id
        c.ack_id(deliveries[1].id)
        c.nack_id(deliveries[0].id)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack_id(deliveries[1].id)
        with pytest.raises(ackqueue.NotHeldError):
            c.nack_id(deliveries[0].id)
        assert [d.id for d in c.deliveries()] == [deliveries[2].id]
        c.close()
        assert drain(q) == ["x", "z"]


def test_delivery_ids_are_unique_across_consumers(qpath):
    with ackqueue.AckQueue(qpath) as q:
        for n in range(4):
            q.put(n)
        c1, c2 = q.connect(), q.connect()
        c1.get()
        c2.get()
        c1.get()
        c2.get()
        ids = [d.id for c in (c1, c2) for d in c.deliveries()]
        assert len(set(ids)) == 4
        with pytest.raises(ackqueue.NotHeldError):
            c1.ack_id(c2.deliveries()[0].id)


def test_ack_after_close_raises_and_changes_nothing(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        c.close()
        assert (q.qsize(), q.unacked_count()) == (1, 0)
        with pytest.raises(ackqueue.NotHeldError, match="closed"):
            c.ack(item)
        with pytest.raises(ackqueue.QueueClosedError):
            c.get_nowait()
        assert (q.qsize(), q.unacked_count()) == (1, 0)
        assert q.get_nowait() == "a"


def test_acking_what_another_consumer_holds_raises_a_clear_error(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put(["shared"])
        mine, theirs = q.connect(), q.connect()
        item = theirs.get()
        with pytest.raises(ackqueue.NotHeldError, match="another consumer") as raised:
            mine.ack(item)
        assert isinstance(raised.value, ValueError)
        with pytest.raises(ackqueue.NotHeldError, match="another consumer"):
            mine.nack(item)
        assert q.unacked_count() == 1
        theirs.ack(item)
        assert (q.qsize(), q.unacked_count()) == (0, 0)


def test_acking_what_was_never_got_raises_and_changes_nothing(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        c.get()
        with pytest.raises(ackqueue.NotHeldError, match="does not hold"):
            c.ack("a" * 2)
        with pytest.raises(ackqueue.NotHeldError):
            c.delivery(object())
        assert q.unacked_count() == 1


def test_double_ack_raises_the_second_time(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put([1])
        q.put([2])
        c = q.connect()
        item = c.get()
        c.ack(item)
        with pytest.raises(ackqueue.NotHeldError):
            c.ack(item)
        with pytest.raises(ackqueue.NotHeldError):
            c.nack(item)
        assert (q.qsize(), q.unacked_count()) == (1, 0)
    with ackqueue.AckQueue(qpath) as q:
        assert drain(q) == [[2]]


def test_consumer_get_blocks_and_times_out_like_queue_get(qpath):
    with ackqueue.AckQueue(qpath) as q:
        c = q.connect()
        with pytest.raises(ackqueue.Empty):
            c.get(timeout=0.05)
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        got = []

        def other():
            with q.connect() as c2:
                item = c2.get(timeout=10)
                got.append(item)
                c2.ack(item)

        t = threading.Thread(target=other)
        t.start()
        wait_for_waiter(q.not_empty)  # the get really blocked: the put is what wakes it
        q.put("wake")
        t.join(10)
        assert got == ["wake"]
        assert (q.qsize(), q.unacked_count()) == (0, 0)


def test_closing_the_queue_gives_back_what_consumers_hold(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        q.put("b")
        c = q.connect()
        c.get()
    assert c.closed
    with ackqueue.AckQueue(qpath) as q:
        assert drain(q) == ["a", "b"]
        with pytest.raises(ackqueue.QueueClosedError):
            c.get_nowait()


def test_a_thread_that_gets_with_another_threads_consumer_gives_back_when_it_dies(qpath):
    """The main thread connects, a worker gets with that consumer and ends without acking:
    the worker's end gives the item back, as if it had connected the consumer itself."""
    with ackqueue.AckQueue(qpath) as q:
        q.put("job")
        c = q.connect()
        got: list[object] = []

        def worker() -> None:
            got.append(c.get(timeout=5))  # and ends without acking

        t = threading.Thread(target=worker, name="worker-7")
        t.start()
        t.join(10)
        assert got == ["job"]
        wait_until(lambda: q.qsize() == 1, what="the job given back")
        assert q.unacked_count() == 0 and c.closed
        with pytest.raises(ackqueue.QueueClosedError, match="its thread 'worker-7' ended"):
            c.get_nowait()
        with q.connect() as again:
            assert again.get_nowait() == "job"


def test_a_consumer_whose_thread_ended_says_so(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("x")
        made: list[ackqueue.Consumer] = []

        def connect_and_hold() -> None:
            c = q.connect()
            c.get()
            made.append(c)

        t = threading.Thread(target=connect_and_hold, name="gone-worker")
        t.start()
        t.join(10)
        wait_until(lambda: made[0].closed, what="the ended thread's consumer closed")
        with pytest.raises(ackqueue.QueueClosedError, match="its thread 'gone-worker' ended"):
            made[0].get(timeout=1)
        assert (q.qsize(), q.unacked_count()) == (1, 0)


SETTLERS = {
    "ack": lambda c, item: c.ack(item),
    "nack": lambda c, item: c.nack(item),
    "snooze": lambda c, item: c.snooze(item, 1),
    "reject": lambda c, item: c.reject(item),
    "extend": lambda c, item: c.extend(item, 1),
    "delivery": lambda c, item: c.delivery(item),
    "ack_many": lambda c, item: c.ack_many([item]),
}


@pytest.mark.parametrize("verb", sorted(SETTLERS))
def test_each_call_on_an_item_not_held_names_itself(qpath, verb):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        c.get()
        not_held = rf"^{verb}\(\): this consumer does not hold that str "
        with pytest.raises(ackqueue.NotHeldError, match=not_held):
            SETTLERS[verb](c, "never got")
        assert q.unacked_count() == 1


@pytest.mark.parametrize("verb", ["ack_id", "nack_id"])
def test_each_call_on_an_unknown_delivery_id_names_itself(qpath, verb):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        c.get()
        with pytest.raises(
            ackqueue.NotHeldError, match=rf"^{verb}\(\): this consumer holds no delivery 12345 "
        ):
            getattr(c, verb)(12345)
        assert q.unacked_count() == 1


def test_a_nack_with_no_delay_gives_the_item_back_at_once(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        c.nack(c.get(), delay=0)
        assert c.get_nowait() == "a"


def test_a_consumer_shows_what_it_holds_and_whether_it_is_closed(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        c.get()
        assert repr(c) == "<Consumer of 'default' for thread 'MainThread': holding 1>"
        c.close()
        assert repr(c) == "<Consumer of 'default' for thread 'MainThread': closed>"


def test_a_snooze_of_negative_seconds_is_refused_naming_it(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        with pytest.raises(ValueError, match="^snooze seconds "):
            c.snooze(item, -1)
        assert q.unacked_count() == 1


@pytest.mark.parametrize("how", ["ack_id", "ack_many"])
def test_an_ack_staged_in_a_transaction_is_safe_from_its_lease(qpath, how):
    with ackqueue.AckQueue(qpath, ack_timeout=0.05) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        with c.transaction():
            if how == "ack_id":
                c.ack_id(c.delivery(item).id)
            else:
                c.ack_many([item])
            time.sleep(0.3)  # the lease's deadline passes while the ack waits for the commit
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_an_extended_lease_keeps_the_item_held_past_its_ack_timeout(qpath):
    with ackqueue.AckQueue(qpath, ack_timeout=0.1) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        c.extend(item, 30)
        time.sleep(0.3)  # past the first lease
        assert q.unacked_count() == 1 and q.qsize() == 0
        c.ack(item)
        assert q.unacked_count() == 0


def test_a_nack_by_id_with_a_delay_holds_the_item_back(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        c.nack_id(c.delivery(c.get()).id, delay=30)
        assert q.qsize() == 0 and q.delayed_count() == 1
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
