"""Holds: who holds what, what a holder is told once it may no longer ack, and holds given
back when their holder goes away (a closed consumer, an ended thread, an immediate shutdown).

Each test names what it pins down in ackqueue/delivery/holds.py; most were mutation survivors
(benchmarks/mutation_survivors.rst), each a change to the code that no test noticed."""

import gc
import logging
import threading
import time
import weakref

import pytest
from polling import wait_until

import ackqueue


@pytest.fixture
def q(qpath):
    with ackqueue.AckQueue(qpath) as queue:
        yield queue


def test_held_lists_each_hold_with_its_owner_and_a_small_age(q):
    q.put("a")
    c = q.connect()
    before = time.time()
    c.get()
    [(owner, delivery, age)] = q.held()
    assert owner == threading.current_thread().name
    assert delivery.item == "a" and delivery.attempts == 1
    assert 0 <= age <= time.time() - before + 1


def test_acking_an_item_nobody_holds_does_not_name_another_consumer(q):
    q.put_many(["a", "b"])
    holder, other = q.connect(), q.connect()
    held = holder.get()
    with pytest.raises(ackqueue.NotHeldError, match="this consumer does not hold that str"):
        other.ack("never got")
    # The item another consumer holds is named as that consumer's.
    with pytest.raises(ackqueue.NotHeldError, match=r"held by another consumer \(thread "):
        other.ack(held)


def test_a_closed_consumer_says_it_was_closed(q):
    q.put("a")
    c = q.connect()
    item = c.get()
    c.close()
    with pytest.raises(ackqueue.NotHeldError, match=r"this consumer is closed \(it was closed\)"):
        c.ack(item)
    assert q.qsize() == 1 and q.unacked_count() == 0


def test_an_immediate_shutdown_gives_back_every_consumers_holds_and_says_so(q):
    q.put_many([1, 2, 3, 4])
    first, second = q.connect(), q.connect()
    one = first.get()
    second.get()
    second.get()
    assert q.unacked_count() == 3
    q.shutdown(immediate=True)
    assert q.unacked_count() == 0
    with pytest.raises(
        ackqueue.NotHeldError,
        match=r"this consumer is closed \(the queue was shut down \(immediate=True\)\)",
    ):
        first.ack(one)


def test_a_closed_consumers_table_is_forgotten(q):
    q.put("a")
    c = q.connect()
    c.ack(c.get())
    table = weakref.ref(c._table)
    c.close()
    del c
    # The thread's exit watch lets go of closed tables at its next connect.
    q.connect().close()
    gc.collect()
    assert table() is None, "the queue keeps the hold table of a closed consumer"


def test_a_thread_that_ends_gives_back_what_each_of_its_consumers_held(q):
    # Both consumers outlive the thread (kept here), so only the thread's end gives back.
    q.put_many(["a", "b"])
    consumers = []

    def work():
        for _ in range(2):
            c = q.connect()
            consumers.append(c)
            c.get()

    t = threading.Thread(target=work, name="worker-1")
    t.start()
    t.join()
    wait_until(lambda: q.unacked_count() == 0, what="both holds given back")
    assert q.qsize() == 2
    assert len(consumers) == 2


def test_a_lease_that_runs_out_is_logged_with_the_queues_name(qpath, caplog):
    with ackqueue.AckQueue(qpath, name="jobs", ack_timeout=0.05) as q:
        q.put("a")
        c = q.connect()
        with caplog.at_level(logging.INFO, logger="ackqueue"):
            item = c.get()
            wait_until(lambda: q.qsize() == 1, what="the lease running out")
        assert "lease of delivery 1 in queue 'jobs' ran out: the item is ready again" in [
            r.getMessage() for r in caplog.records
        ]
        expired = r"held that str longer than its lease \(ack_timeout=0\.05s\)"
        with pytest.raises(ackqueue.LeaseExpiredError, match=expired):
            c.ack(item)


def test_a_lease_that_runs_out_hands_the_item_to_the_next_get_and_counts_it_no_longer(qpath):
    with ackqueue.AckQueue(qpath, ack_timeout=0.05) as q:
        q.put("a")
        late = q.connect()
        late.get()
        wait_until(lambda: q.qsize() == 1, what="the lease running out")
        assert q.unacked_count() == 0
        next_one = q.connect()
        assert next_one.get_nowait() == "a"
        assert q.unacked_count() == 1


def test_a_lease_runs_for_its_whole_ack_timeout(qpath):
    with ackqueue.AckQueue(qpath, ack_timeout=30) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        time.sleep(0.2)  # a lease that ran from its start backwards would be out by now
        c.ack(item)
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_a_lease_does_not_take_back_an_ack_staged_in_a_transaction(qpath):
    with ackqueue.AckQueue(qpath, ack_timeout=0.05) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        with c.transaction():
            c.ack(item)
            time.sleep(0.3)  # the lease's deadline passes while the ack waits for the commit
        assert q.qsize() == 0 and q.unacked_count() == 0
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_the_status_snapshot_lists_each_hold(q):
    q.put(("job", 1))
    c = q.connect()
    before = time.time()
    c.get()
    [hold] = q.status_snapshot()["held"]
    assert hold["owner"] == threading.current_thread().name
    assert hold["attempts"] == 1 and isinstance(hold["id"], int)
    assert before <= hold["got_at"] <= time.time()
    [(_, delivery, _)] = q.held()
    assert hold["id"] == delivery.id
    assert hold["key"] == repr(int(hold["key"]))  # a FIFO queue's key: a sequence number


def test_an_ack_rolled_back_after_its_lease_ran_out_gives_the_item_back_at_once(qpath):
    with ackqueue.AckQueue(qpath, ack_timeout=0.05) as q:
        q.put("a")
        c = q.connect()
        item = c.get()
        with pytest.raises(RuntimeError, match="changed my mind"), c.transaction():
            c.ack(item)
            time.sleep(0.3)  # the lease runs out while the ack is staged
            raise RuntimeError("changed my mind")
        # The rolled-back ack leaves a hold past its deadline: taken back there and then.
        assert q.qsize() == 1 and q.unacked_count() == 0
        with pytest.raises(ackqueue.LeaseExpiredError):
            c.ack(item)
