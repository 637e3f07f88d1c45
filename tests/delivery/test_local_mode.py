"""Single-process mode (ackqueue/delivery/local.py): attempts counted in memory or stored,
plain gets inside transactions, queues on a caller's own database, and the end of the
sequence numbers. Most were mutation survivors (benchmarks/mutation_survivors.rst)."""

import pytest
import ZODB
from ZODB.MappingStorage import MappingStorage

import ackqueue
from ackqueue.records import SEQ_MASK


def test_attempts_go_on_from_the_count_an_earlier_session_stored(qpath):
    with ackqueue.AckQueue(qpath, max_attempts=5) as q:  # counts each delivery durably
        q.put("a")
        c = q.connect()
        assert c.delivery(c.get()).attempts == 1
    with ackqueue.AckQueue(qpath) as q:  # counts in memory, on top of the stored count
        c = q.connect()
        item = c.get()
        assert c.delivery(item).attempts == 2
        c.nack(item)
        assert c.delivery(c.get()).attempts == 3


@pytest.mark.parametrize("deliveries", [1, 2])
def test_a_snooze_gives_its_delivery_back(qpath, deliveries):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        c = q.connect()
        for _ in range(deliveries - 1):
            c.nack(c.get())
        item = c.get()
        assert c.delivery(item).attempts == deliveries
        c.snooze(item, 0.01)
        item = c.get(timeout=5)
        assert c.delivery(item).attempts == deliveries  # the snoozed one did not count


def test_an_item_delivered_max_attempts_times_goes_to_the_dead_letters_saying_so(qpath):
    with ackqueue.AckQueue(qpath, max_attempts=1) as q:
        q.put("a")
        c = q.connect()
        c.get()
    with ackqueue.AckQueue(qpath, max_attempts=1) as q:
        with pytest.raises(ackqueue.Empty):
            q.connect().get_nowait()
        [dead] = q.dead_letters()
        assert dead.reason == "delivered 1 times without an ack (max_attempts)"


def test_a_plain_get_in_a_rolled_back_transaction_leaves_the_item(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("a")
        with pytest.raises(RuntimeError), q.transaction():
            assert q.get_nowait() == "a"
            raise RuntimeError("roll back")
        assert q.qsize() == 1
        with q.transaction():
            assert q.get_nowait() == "a"
        assert q.qsize() == 0
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_a_queue_on_a_callers_database_keeps_its_count_across_opens():
    db = ZODB.DB(MappingStorage())  # no transaction log to keep counts in: the count is stored
    try:
        with ackqueue.AckQueue(db=db) as q:
            q.put_many(["a", "b", "c"])
            q.get()
        with ackqueue.AckQueue(db=db) as q:
            assert q.qsize() == 2
            assert [q.get(), q.get()] == ["b", "c"]
    finally:
        db.close()


def test_a_queue_that_used_up_its_sequence_numbers_says_so_and_stores_nothing(qpath):
    with ackqueue.AckQueue(qpath) as q:
        # 2**40 puts are out of reach of a test: start this session at the last number.
        q._mode._next_seq = SEQ_MASK
        q.put("the last one")
        with pytest.raises(ackqueue.AckQueueError, match="queue 'default' has used up its"):
            q.put("one too many")
        assert q.qsize() == 1
        assert q.get() == "the last one"


def test_a_plain_get_committed_in_a_transaction_frees_its_groups_place(qpath):
    with ackqueue.AckQueue(qpath, max_held_per_group=1) as q:
        q.put("a", group="host")
        q.put("b", group="host")
        with q.transaction():
            assert q.get_nowait() == "a"
        assert q.get_nowait() == "b"  # "a" is gone: its group has room again
