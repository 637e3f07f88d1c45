"""Each collaborator of a queue works, and is tested, on its own: a Book over a Store, a
Supply over a Book, Holds over a Supply, the LocalMode, the Orderings. Real parts (an
in-memory or file store, real timers), no queue object, and nothing reached inside another."""

from __future__ import annotations

import threading

import pytest

import ackqueue
from ackqueue.base.timers import Timers
from ackqueue.delivery.conditions import Lifecycle, ReadyListeners, Signals, Tasks
from ackqueue.delivery.groups import Grouping, GroupRules
from ackqueue.delivery.holds import Holds
from ackqueue.delivery.local import LocalMode
from ackqueue.delivery.ordering import PRIORITY_LIMIT, LifoOrdering, Ordering, PriorityOrdering
from ackqueue.delivery.supply import Claim, Supply
from ackqueue.shared.mode import SharedMode
from ackqueue.storage.book import Book
from ackqueue.storage.items import Staged, pickle_item
from ackqueue.storage.store import Store


@pytest.fixture
def store(qpath):
    s = Store.acquire(qpath, None)
    yield s
    s.release()


def staged(order: Ordering, seq: int, item: object, due: float = 0.0) -> Staged:
    return Staged(order.make_key(seq, 0, item, lambda: None), seq, pickle_item(item), due)


def test_book_edits_and_reads_one_queue(store):
    book = Book(store, "jobs", "fifo", "AckQueue", SharedMode.keeping)
    order = Ordering()
    store.run(book.inserter([staged(order, n, f"item-{n}") for n in range(3)], now=5.0))
    assert book.count() == 3 and book.put_at(order.make_key(0, 0, None, lambda: None)) == 5.0
    store.run(book.deleter([0], check=True))
    store.run(lambda: book.bury(1, "bad", 6.0, None))
    assert book.count() == 1 and book.dead_count() == 1
    [letter] = book.dead_letters()
    assert (letter.item, letter.reason) == ("item-1", "bad")
    fresh = {letter.id: Staged(order.rekey(1, 10), 10, b"")}
    assert [s.key for s in store.run(book.requeuer(fresh))] == [10]
    assert book.count() == 2 and book.dead_count() == 0
    with pytest.raises(ackqueue.AckQueueError, match="not stored"):
        store.run(book.deleter([0], check=True))  # deleted already: the check refuses
    assert store.run(book.purger(None)) == 0
    book.close()


def test_book_refuses_a_record_of_another_kind(store):
    Book(store, "jobs", "fifo", "AckQueue", SharedMode.keeping).close()
    with pytest.raises(ackqueue.NotAQueueFileError, match="fifo queue class, not LifoAckQueue"):
        Book(store, "jobs", "lifo", "LifoAckQueue", SharedMode.keeping)


def parts(store, order: Ordering, backlog_items: int = 0):
    """A Supply and Holds over a fresh Book, with the lock and conditions a queue would give."""
    book = Book(store, "q", order.kind, "AckQueue", SharedMode.keeping)
    if backlog_items:
        store.run(book.inserter([staged(order, n, n) for n in range(backlog_items)], now=1.0))
    mutex = threading.Lock()
    signals = Signals(
        mutex, threading.Condition(mutex), threading.Condition(mutex),
        threading.Condition(mutex), threading.Condition(mutex),
    )
    life, tasks = Lifecycle("q"), Tasks()
    clock = ackqueue.ManualClock(1000.0)
    timers = Timers(mutex, clock, "q")
    supply = Supply(
        signals, life, tasks, book, order, clock, timers,
        Grouping(GroupRules(), order.key_id, clock),
    )
    return book, signals, life, tasks, clock, supply


def test_supply_reads_the_backlog_in_order_and_lands_new_keys(store):
    order = Ordering()
    book, signals, _life, tasks, clock, supply = parts(store, order, backlog_items=3)
    with signals.mutex:
        assert len(supply) == 3 and tasks.unfinished == 3
        assert [supply.pop() for _ in range(2)] == [0, 1]
        supply.make_ready_locked(0)  # given back: first again
        supply.land_locked(50, due=clock() + 10)  # a delayed key waits for its time
        assert len(supply.delays) == 1 and supply.pop() == 0
    clock.advance(10)
    with signals.mutex:
        assert [supply.pop(), supply.pop()] == [2, 50]
    book.close()


def test_an_immediate_shutdown_drains_the_supply_and_settles_join(store):
    book, signals, life, tasks, _clock, supply = parts(store, Ordering(), backlog_items=2)
    with signals.mutex:
        life.drained = True
        assert supply.drain_locked() == 2
        tasks.finished_locked(2)
        supply.make_ready_locked(7)  # comes back after the drain: forgotten, and done
        assert len(supply) == 0 and tasks.unfinished == 0
    book.close()


def test_holds_take_back_a_hold_whose_lease_runs_out(store):
    book, signals, _life, _tasks, clock, supply = parts(store, Ordering(), backlog_items=1)
    holds = Holds(supply, Timers(signals.mutex, clock, "q"), "q", ack_timeout=5.0)
    table = holds.new_table()
    with signals.mutex:
        key = supply.pop()
        [hold] = holds.add_locked(table, [Claim(key, "item", 1)])
        assert holds.count == 1 and table.find("item") is hold
    clock.advance(5)
    with signals.mutex:
        assert holds.count == 0 and len(supply) == 1 and table.expired[-1] is hold
        with pytest.raises(ackqueue.LeaseExpiredError):
            holds.extend_locked(table, hold, 5)
    book.close()


def test_local_mode_counts_deliveries_durably_with_max_attempts(store):
    order = Ordering()
    book, signals, _life, _tasks, clock, supply = parts(store, order, backlog_items=1)
    mode = LocalMode(book, order, signals.mutex, clock, max_attempts=2)
    counts = []
    for _ in range(3):
        with signals.mutex:
            key = supply.pop()
        taken = mode.take([Claim(key, 0, 0)], supply)
        counts.append([c.attempts for c in taken.kept] + [-1 for _ in taken.buried])
        with signals.mutex:
            if taken.kept:
                supply.make_ready_locked(key)
    assert counts == [[1], [2], [-1]]  # the third delivery is out of attempts: buried
    assert book.dead_count() == 1 and book.count() == 0
    book.close()


@pytest.mark.parametrize(
    "order, keys_in_delivery_order",
    [(Ordering(), [0, 1, 2]), (LifoOrdering(), [2, 1, 0])],
)
def test_orderings_make_keys_in_their_delivery_order(order, keys_in_delivery_order):
    keys = {seq: order.make_key(seq, 0, None, lambda: None) for seq in range(3)}
    assert sorted(keys, key=keys.__getitem__) == keys_in_delivery_order
    assert all(order.key_seq(key) == seq for seq, key in keys.items())
    assert order.key_seq(order.rekey(keys[0], 9)) == 9


def test_priority_ordering_compares_a_new_item_with_the_head_before_storing():
    order = PriorityOrdering()
    assert order.make_key(1, 0, (1, "a"), lambda: ((0, "b"), 0)) == ((1, "a"), 1)
    with pytest.raises(TypeError):
        order.make_key(2, 0, "text", lambda: ((0, "b"), 0))
    with pytest.raises(ValueError, match="omit priority"):
        order.check_priority(3)
    with pytest.raises(TypeError, match="must be an int"):
        Ordering().check_priority("high")


def test_ready_listeners_wake_the_longest_waiting_first_one_an_item_and_all_at_a_change():
    """Coroutines awaiting a get are woken in the order they began to wait, one an item (a
    plain ``wake()``), every one at a change they must all look at (``wake(None)``); one that
    stops waiting before it is woken says so, one woken first says it may owe a wake-up."""
    listeners = ReadyListeners()
    woken: list[str] = []
    tokens = {name: listeners.add(lambda name=name: woken.append(name)) for name in "abcd"}
    listeners.wake()
    assert woken == ["a"]
    listeners.wake(2)
    assert woken == ["a", "b", "c"]
    assert listeners.discard(tokens["b"]) is False  # woken already: it may owe a wake-up
    assert listeners.discard(tokens["d"]) is True  # still waiting: now gone
    listeners.wake()
    assert woken == ["a", "b", "c"] and len(listeners) == 0
    more = [listeners.add(lambda n=n: woken.append(f"e{n}")) for n in range(3)]
    listeners.wake(None)
    assert woken[3:] == ["e0", "e1", "e2"] and len(listeners) == 0
    assert all(listeners.discard(token) is False for token in more)


def test_the_errors_of_a_closed_or_shut_down_queue_name_it():
    life = Lifecycle("jobs")
    assert not (life.closed or life.shut_down or life.drained or life.paused)
    life.check_open()
    life.check_can_put()
    life.shut_down = True
    with pytest.raises(ackqueue.ShutDown, match="^queue 'jobs' was shut down$"):
        life.check_can_put()
    life.closed = True
    with pytest.raises(ackqueue.QueueClosedError, match="^queue 'jobs' is closed$"):
        life.check_can_put()
    with pytest.raises(ackqueue.QueueClosedError, match="^queue 'jobs' is closed$"):
        life.check_open()


def test_priorities_are_ints_within_their_limits_and_a_priority_queue_takes_none():
    order, lifo = Ordering(), LifoOrdering()
    for priority in (-PRIORITY_LIMIT, 0, PRIORITY_LIMIT - 1):
        order.check_priority(priority)
    low = order.make_key(5, -PRIORITY_LIMIT, None, lambda: None)
    high = order.make_key(5, PRIORITY_LIMIT - 1, None, lambda: None)
    assert low < order.make_key(0, 0, None, lambda: None) < high
    assert lifo.make_key(5, -PRIORITY_LIMIT, None, lambda: None) < lifo.make_key(
        9, 0, None, lambda: None)
    assert [order.key_seq(low), order.key_seq(high)] == [5, 5]
    for priority in (-PRIORITY_LIMIT - 1, PRIORITY_LIMIT):
        with pytest.raises(ValueError, match=r"^priority must be in \[-4194304, 4194304\)$"):
            order.check_priority(priority)
    for wrong, named in (("1", "str '1'"), (True, "bool True"), (1.0, "float 1.0")):
        with pytest.raises(TypeError, match=rf"^priority must be an int \(lower is delivered "
                           rf"first\), not {named}$"):
            order.check_priority(wrong)
    PriorityOrdering().check_priority(0)
    with pytest.raises(ValueError, match="^PriorityAckQueue orders by the items themselves; "
                       "omit priority=$"):
        PriorityOrdering().check_priority(3)
