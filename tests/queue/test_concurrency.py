"""Many producer and consumer threads on one queue: every item is delivered exactly once.

Each run ends with the file reopened, so what the threads did is checked as stored, too.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest
from polling import bounded, wait_until

import ackqueue

PRODUCERS = 4
CONSUMERS = 4
PER_PRODUCER = 150
DONE = "done"


def produce_all(q, p):
    for i in range(PER_PRODUCER):
        q.put((p, i))


def run_threads(targets):
    errors = []

    def guarded(target, *args):
        try:
            target(*args)
        except BaseException as exc:  # report it in the test, not as a thread warning
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "threads hung"
    assert not errors, errors


def run_producers_and_consumers(q, consumers, done=DONE, dones=CONSUMERS):
    """PRODUCERS threads put their items, then ``dones`` copies of ``done`` follow, while
    ``consumers`` (argument tuples, each a consumer function and its arguments) run."""
    remaining = threading.Semaphore(0)

    def produce(p):
        produce_all(q, p)
        remaining.release()

    def finish():
        for _ in range(PRODUCERS):
            remaining.acquire()
        for _ in range(dones):
            q.put(done)

    run_threads([(produce, p) for p in range(PRODUCERS)] + consumers + [(finish,)])


def check_exactly_once(per_consumer):
    delivered = Counter(item for got in per_consumer for item in got)
    expected = {(p, i) for p in range(PRODUCERS) for i in range(PER_PRODUCER)}
    assert set(delivered) == expected
    assert max(delivered.values()) == 1


def check_fifo_per_producer(per_consumer):
    # A consumer's gets are sequential and each producer's puts are too, so in a FIFO
    # queue every consumer sees any one producer's items in increasing order.
    for got in per_consumer:
        for p in range(PRODUCERS):
            mine = [i for q, i in got if q == p]
            assert mine == sorted(mine)


@pytest.mark.parametrize("maxsize", [0, 5])
def test_producers_and_plain_getters_deliver_each_item_once(qpath, maxsize):
    per_consumer = [[] for _ in range(CONSUMERS)]
    with ackqueue.AckQueue(qpath, maxsize=maxsize) as q:

        def consume(got):
            while (item := q.get(timeout=30)) != DONE:
                got.append(item)
                q.task_done()
            q.task_done()

        run_producers_and_consumers(q, [(consume, g) for g in per_consumer])
        assert q.qsize() == 0
        q.join()
        with pytest.raises(ValueError):
            q.task_done()
    check_exactly_once(per_consumer)
    check_fifo_per_producer(per_consumer)
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_producers_and_acking_consumers_deliver_each_item_once(qpath):
    per_consumer = [[] for _ in range(CONSUMERS)]
    with ackqueue.AckQueue(qpath) as q:

        def consume(got):
            with q.connect() as c:
                while (item := c.get(timeout=30)) != DONE:
                    got.append(item)
                    c.ack(item)
                c.ack(item)

        run_producers_and_consumers(q, [(consume, g) for g in per_consumer])
        assert (q.qsize(), q.unacked_count()) == (0, 0)
        q.join()  # every ack counted as task_done
    check_exactly_once(per_consumer)
    check_fifo_per_producer(per_consumer)
    with ackqueue.AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_consumers_nacking_at_random_still_ack_each_item_once(qpath):
    acked = [[] for _ in range(CONSUMERS)]
    nacks = Counter()
    lock = threading.Lock()
    with ackqueue.AckQueue(qpath) as q:

        def consume(seed, got):
            rng = random.Random(seed)
            with q.connect() as c:
                for _ in bounded(100_000, "consuming until DONE"):
                    held = [c.get(timeout=30) for _ in range(rng.randint(1, 3))]
                    rng.shuffle(held)
                    for item in held:
                        if item == DONE:
                            continue
                        if rng.random() < 0.3:
                            with lock:
                                nacks[item] += 1
                            c.nack(item)
                        else:
                            got.append(item)
                            c.ack(item)
                    if DONE in held:
                        for item in held:
                            if item == DONE:
                                c.ack(item)
                        return

        # Several DONEs per consumer: a consumer may take more than one in a batch.
        consumers = [(consume, seed, got) for seed, got in enumerate(acked)]
        run_producers_and_consumers(q, consumers, dones=CONSUMERS * 3)
        leftover = []
        for _ in bounded(100_000, "draining the queue"):
            if q.empty():
                break
            leftover.append(q.get())
        assert q.unacked_count() == 0
    # Items still queued when the consumers stopped (behind DONEs, or nacked late) are
    # delivered to the drain above: together, each item exactly once.
    assert set(leftover) <= {DONE} | {(p, i) for p in range(PRODUCERS) for i in range(PER_PRODUCER)}
    check_exactly_once([*acked, [x for x in leftover if x != DONE]])
    assert sum(nacks.values()) > 0


@pytest.mark.parametrize("cls", [ackqueue.LifoAckQueue, ackqueue.PriorityAckQueue])
def test_other_orders_deliver_each_item_once_under_concurrency(qpath, cls):
    per_consumer = [[] for _ in range(CONSUMERS)]
    with cls(qpath) as q:
        stop = (PRODUCERS, 0)  # sorts after every item in a PriorityAckQueue

        def consume(got):
            with q.connect() as c:
                for _ in bounded(100_000, "consuming until the stop item"):
                    item = c.get(timeout=30)
                    c.ack(item)
                    if item == stop:
                        return
                    got.append(item)

        run_producers_and_consumers(q, [(consume, g) for g in per_consumer], done=stop)
        leftover = [q.get() for _ in range(q.qsize())]
    # LIFO hands the stop items out first, so items may be left for this drain.
    check_exactly_once([*per_consumer, [x for x in leftover if x != stop]])


def close_under_producers(path, close_after):
    """Close the queue once ``close_after`` puts returned; return (returned, put errors)."""
    q = ackqueue.AckQueue(path)
    returned = []
    failures = []
    go = threading.Barrier(PRODUCERS + 1)

    def produce(p):
        go.wait()
        for i in range(10_000):
            try:
                q.put((p, i))
            except Exception as exc:
                failures.append(exc)
                return
            returned.append((p, i))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    for t in threads:
        t.start()
    go.wait()
    wait_until(lambda: len(returned) >= close_after, 30)
    q.close()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return returned, failures


def test_closing_the_queue_under_producers_fails_their_puts_cleanly(tmp_path):
    """close() while puts are committing: each put either returns (and its item is stored)
    or raises QueueClosedError; nothing half-done, nothing lost, the file reopens."""
    for trial in range(5):
        path = str(tmp_path / f"q{trial}.fs")
        returned, failures = close_under_producers(path, close_after=20 + 10 * trial)
        assert len(failures) == PRODUCERS
        assert all(isinstance(e, ackqueue.QueueClosedError) for e in failures), failures
        with ackqueue.AckQueue(path) as q:
            stored = {q.get() for _ in range(q.qsize())}
        assert set(returned) <= stored


class _WorkerQuits(BaseException):
    """Ends a worker thread on the spot, as a crash would, holding what it holds."""


@pytest.mark.parametrize("seed", [1, 2])
def test_mixed_random_workload_delivers_each_item_once(tmp_path, seed):
    """Eight threads mix puts, plain gets, consumer gets with acks and nacks, consumer
    closes and drops, and deaths while holding; rounds end with a reopen. Each item that
    was put is taken for good (plain get or ack) exactly once."""
    rng0 = random.Random(seed)
    cls = [ackqueue.AckQueue, ackqueue.LifoAckQueue][seed % 2]
    path = str(tmp_path / "q.fs")
    maxsize = rng0.choice([0, 5])
    lock = threading.Lock()
    put_returned = Counter()
    taken = Counter()

    def worker(q, wseed):
        rng = random.Random(wseed)
        c = None
        try:
            for step in range(150):
                r = rng.random()
                if r < 0.35:
                    try:
                        q.put((wseed, step), timeout=0.2)
                    except ackqueue.Full:
                        continue
                    with lock:
                        put_returned[(wseed, step)] += 1
                elif r < 0.45:
                    try:
                        item = q.get(timeout=0.01)
                    except ackqueue.Empty:
                        continue
                    with lock:
                        taken[item] += 1
                elif r < 0.85:
                    c = c or q.connect()
                    try:
                        item = c.get(timeout=0.01)
                    except ackqueue.Empty:
                        continue
                    roll = rng.random()
                    if roll < 0.25:
                        c.nack(item)
                    elif roll < 0.28:
                        raise _WorkerQuits
                    else:
                        c.ack(item)
                        with lock:
                            taken[item] += 1
                elif c is not None:
                    if rng.random() < 0.5:
                        c.close()
                    c = None  # else dropped: garbage collection gives back what it held
        except _WorkerQuits:
            return

    q = cls(path, maxsize=maxsize)
    try:
        for round_ in range(3):
            threads = [
                threading.Thread(target=worker, args=(q, seed * 1000 + round_ * 10 + k))
                for k in range(8)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not any(t.is_alive() for t in threads)
            wait_until(lambda q=q: q.unacked_count() == 0, 5)
            q.close()
            q = cls(path, maxsize=maxsize)
        for _ in bounded(100_000, "draining the queue"):
            try:
                taken[q.get_nowait()] += 1
            except ackqueue.Empty:
                break
    finally:
        q.close()
    assert set(taken) == set(put_returned)
    assert max(taken.values()) == 1
    assert len(put_returned) > 300
