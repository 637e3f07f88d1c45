"""``with c.transaction():`` / ``with q.transaction():`` commit together or not at all."""

from __future__ import annotations

import os
import random
import threading

import pytest
from polling import bounded
from semantic_helpers import run_and_maybe_kill

import ackqueue
from ackqueue import AckQueue, Empty, TransactionError


def drain(q: AckQueue) -> list:
    out = []
    with q.connect() as c:
        for _ in bounded(1_000_000, "draining the queue"):
            try:
                out.append(c.get_nowait())
            except Empty:
                return out


def test_transaction_commits_puts_gets_and_acks_across_queues_in_one_commit(qpath):
    with AckQueue(qpath, name="a") as a, AckQueue(qpath, name="b") as b:
        a.put_many(["page1", "page2"])
        c = a.connect()
        page = c.get()
        commits = a._store.commits
        with c.transaction():
            c.ack(page)
            b.put("link1")
            b.put("link2")
            a.put("page3")
        assert a._store.commits == commits + 1
        assert b.qsize() == 2 and a.qsize() == 2 and a.unacked_count() == 0
    with AckQueue(qpath, name="a") as a, AckQueue(qpath, name="b") as b:
        assert drain(a) == ["page2", "page3"]
        assert drain(b) == ["link1", "link2"]


def test_exception_rolls_back_puts_acks_and_gets(qpath):
    with AckQueue(qpath, name="a") as a, AckQueue(qpath, name="b") as b:
        a.put_many([1, 2, 3])
        c = a.connect()
        held = c.get()
        with pytest.raises(RuntimeError), c.transaction():
            c.ack(held)  # undone: still held afterwards
            got = c.get()  # goes back where it was
            assert got == 2
            b.put("vanishes")
            a.put("vanishes too")
            raise RuntimeError("crawler step failed")
        assert a.unacked_count() == 1 and c.delivery(held).attempts == 1
        assert b.qsize() == 0 and a.qsize() == 2
        assert c.get() == 2  # back in its original place, ahead of 3
        c.ack(held)  # the undone ack can be done again
        c.close()
    with AckQueue(qpath, name="a") as a, AckQueue(qpath, name="b") as b:
        assert drain(a) == [2, 3]
        assert drain(b) == []


def test_plain_get_inside_a_rolled_back_transaction_puts_the_item_back(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["x", "y"])
        with pytest.raises(KeyError), q.transaction():
            assert q.get() == "x"
            raise KeyError
        assert q.get() == "x"
        with q.transaction():
            assert q.get() == "y"
    with AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_nack_and_reject_inside_a_transaction_take_effect_only_on_commit(qpath):
    with AckQueue(qpath) as q:
        q.put_many(["n", "r"])
        c = q.connect()
        n, r = c.get(), c.get()
        with pytest.raises(ValueError), c.transaction():
            c.nack(n)
            c.reject(r, reason="bad")
            assert q.qsize() == 0 and q.dead_count() == 0
            raise ValueError
        assert q.unacked_count() == 2 and q.dead_count() == 0
        with c.transaction():
            c.nack(n)
            c.reject(r, reason="bad")
        assert q.qsize() == 1 and q.dead_count() == 1 and q.unacked_count() == 0


def test_puts_in_an_open_transaction_are_invisible_to_other_threads_until_commit(qpath):
    with AckQueue(qpath) as q:
        started, release = threading.Event(), threading.Event()
        got: list = []

        def producer() -> None:
            with q.transaction():
                q.put("late")
                started.set()
                release.wait(5)

        t = threading.Thread(target=producer)
        t.start()
        started.wait(5)
        with pytest.raises(Empty):
            q.get(timeout=0.05)
        consumer = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
        consumer.start()
        release.set()
        t.join(5)
        consumer.join(5)
        assert got == ["late"]


def test_a_transaction_spans_one_database_and_does_not_nest(tmp_path):
    with (
        AckQueue(os.path.join(tmp_path, "1.fs")) as q1,
        AckQueue(os.path.join(tmp_path, "2.fs")) as q2,
    ):
        with pytest.raises(TransactionError, match="one database"), q1.transaction():
            q2.put(1)
        with q1.transaction(), pytest.raises(TransactionError, match="nest"), q1.transaction():
            pass
        assert q1.qsize() == q2.qsize() == 0
        with q1.transaction():
            q1.put("fine")
        assert q1.qsize() == 1


def test_transactions_of_different_threads_are_independent(qpath):
    with AckQueue(qpath) as q:
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(20):
                    try:
                        with q.transaction():
                            q.put((n, i))
                            if i % 2:
                                raise ZeroDivisionError
                    except ZeroDivisionError:
                        pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert sorted(drain(q)) == sorted((n, i) for n in range(4) for i in range(0, 20, 2))


CRAWLER = r"""
import random, sys
from ackqueue import AckQueue, Empty
path, pages = sys.argv[1], int(sys.argv[2])

def links(page):
    r = random.Random(page)
    return sorted({r.randrange(pages) for _ in range(3)})

frontier = AckQueue(path, name="frontier")
seen_q = AckQueue(path, name="seen")      # every link ever put on the frontier, once
done = AckQueue(path, name="done")        # every page whose ack committed, once
with seen_q.connect() as peek:            # rebuild the in-memory seen set; close gives back
    seen = set()
    while True:
        try:
            seen.add(peek.get_nowait())
        except Empty:
            break
if not seen:
    with frontier.transaction():
        frontier.put(0)
        seen_q.put(0)
    seen.add(0)
print("ready", flush=True)
c = frontier.connect()
while True:
    try:
        page = c.get_nowait()
    except Empty:
        break
    new = [link for link in links(page) if link not in seen]
    with c.transaction():
        c.ack(page)
        done.put(page)
        for link in new:
            frontier.put(link)
            seen_q.put(link)
    seen.update(new)
    print(page, flush=True)  # a step done: the test counts these to choose its kill
print("finished", flush=True)
"""


def reachable(pages: int) -> set[int]:
    def links(page: int) -> list[int]:
        r = random.Random(page)
        return sorted({r.randrange(pages) for _ in range(3)})

    todo, seen = [0], {0}
    while todo:
        for link in links(todo.pop()):
            if link not in seen:
                seen.add(link)
                todo.append(link)
    return seen


@pytest.mark.campaign
def test_sigkilled_crawler_puts_each_link_once_and_acks_each_page_once(qpath):
    pages, rng, kills = 400, random.Random(4), 0
    for _ in range(60):
        finished, out = run_and_maybe_kill(CRAWLER, qpath, str(pages), rng=rng, max_events=40)
        if finished:
            assert "finished" in out
            break
        kills += 1
    else:
        raise AssertionError("the crawler never finished")
    assert kills >= 5, "the crawler was hardly ever killed: the test proved little"
    expected = reachable(pages)
    with AckQueue(qpath, name="frontier") as frontier:
        assert frontier.qsize() == 0 and frontier.delayed_count() == 0
    with AckQueue(qpath, name="seen") as seen_q:
        seen = drain(seen_q)
    with AckQueue(qpath, name="done") as done_q:
        done = drain(done_q)
    assert len(seen) == len(set(seen)), "a link was put twice"
    assert set(seen) == expected
    assert len(done) == len(set(done)), "a page was acked twice"
    assert set(done) == expected


def test_failed_commit_rolls_the_transaction_back(qpath):
    with AckQueue(qpath) as q:
        q.put("kept")
        c = q.connect()
        item = c.get()
        # An entry deleted behind the queue's back makes the transaction's check fail at
        # commit: nothing of the transaction may be written then.
        q._store.run(lambda: q._book.remove_entry(c._table.find(item).key))
        with pytest.raises(ackqueue.AckQueueError, match="not stored"), c.transaction():
            c.ack(item)
            q.put("must vanish")
        assert q.qsize() == 0 and q.unacked_count() == 1
    with AckQueue(qpath) as q:
        assert q.qsize() == 0


def test_threads_mixing_transactions_delays_and_rejects_settle_every_item_once(qpath):
    """4 workers; each step acks an item and records it in a 'done' queue in one transaction,
    or nacks it with a short delay, or rejects it. Every item ends done once or dead once."""
    with AckQueue(qpath, name="work", max_attempts=3) as work, AckQueue(qpath, name="done") as done:
        work.put_many(range(300))
        errors: list[BaseException] = []

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            try:
                with work.connect() as c:
                    for _ in bounded(100_000, "a worker's batches"):
                        try:
                            batch = c.get_many(rng.randint(1, 5), timeout=0.5)
                        except Empty:
                            if work.delayed_count() == 0 and work.unacked_count() == 0:
                                return
                            continue
                        for item in batch:
                            roll = rng.random()
                            if roll < 0.7:
                                with c.transaction():
                                    c.ack(item)
                                    done.put(item)
                            elif roll < 0.95:
                                c.nack(item, delay=rng.choice([None, 0.01]))
                            else:
                                c.reject(item, reason="unlucky")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        finished = drain(done)
        dead = [d.item for d in work.dead_letters()]
        assert len(finished) == len(set(finished))
        assert sorted(finished + dead) == list(range(300))
        assert work.qsize() == work.unacked_count() == work.delayed_count() == 0


def test_with_max_attempts_a_rolled_back_get_still_counts_its_delivery(qpath):
    with AckQueue(qpath, max_attempts=2) as q:
        q.put("poison")
        c = q.connect()
        for attempt in (1, 2):
            with pytest.raises(ZeroDivisionError), c.transaction():
                item = c.get()
                assert c.delivery(item).attempts == attempt
                raise ZeroDivisionError  # the handler fails: the step is rolled back
        assert q.qsize() == 1  # back in the queue... and out of attempts
        with pytest.raises(Empty):
            c.get_nowait()
        assert [d.item for d in q.dead_letters()] == ["poison"]
