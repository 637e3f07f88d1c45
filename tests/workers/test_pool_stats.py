"""WorkerPool's PoolStats: ``dead`` counts what the queue buries as the pool takes it, each run
reports its own counts, and the finished line counts as ready what a group's rules hold back."""

import logging

import ackqueue
from ackqueue.workers.pool import Retry, WorkerPool

FAST = Retry(base=0.01, factor=2.0, jitter=0.0)


def spend_attempts(path, times, **options):
    """Deliver the head item ``times`` times without an ack, each by a program that then ends
    (as a handler that kills its process would): its attempts are spent by earlier runs."""
    for _ in range(times):
        with ackqueue.AckQueue(path, **options) as q:
            q.connect().get_nowait()


def test_an_item_the_queue_buries_at_the_pools_get_counts_as_dead(qpath):
    """With ``max_attempts``, an item delivered that many times without an ack goes to the
    dead letters when it is next taken: the queue buries it at the pool's get, no handler
    runs, and the pool's stats said dead=0."""
    handled = []
    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        q.put("spent")
    spend_attempts(qpath, 2, max_attempts=2)
    with ackqueue.AckQueue(qpath, max_attempts=2) as q:
        q.put_many(["a", "b"])
        stats = WorkerPool(q, handled.append, threads=2, retry=FAST).run_until_empty()
        assert [letter.item for letter in q.dead_letters()] == ["spent"]
        assert (q.qsize(), q.unacked_count()) == (0, 0)
    assert sorted(handled) == ["a", "b"]
    assert (stats.done, stats.failed, stats.dead, stats.stopped_by) == (2, 0, 1, None)


def test_each_run_reports_its_own_counts(qpath):
    """A pool run again reported the counts of every run so far, and the stats a first run
    returned changed under its caller as the second one ran."""
    def handler(item):
        if item == "poison":
            raise ValueError("cannot parse")

    with ackqueue.AckQueue(qpath, max_attempts=1) as q:
        pool = WorkerPool(q, handler, threads=2, retry=FAST)
        q.put_many(["poison", 1, 2, 3])
        first = pool.run_until_empty()
        q.put_many([4, 5])
        second = pool.run_until_empty()
        assert pool.stats == second
    assert (first.done, first.failed, first.dead, first.stopped_by) == (3, 1, 1, None)
    assert (second.done, second.failed, second.dead, second.stopped_by) == (2, 0, 0, None)


def test_the_finished_line_counts_as_ready_what_a_groups_rules_hold_back(qpath, caplog):
    """``qsize()`` leaves out the items of a paused group; the rest of the pool counts them
    as ready (``_ready_total``), and so does the line that says how the run finished."""
    with ackqueue.AckQueue(qpath) as q:
        q.put_many(["x", "y"], group="paused")
        q.pause_group("paused", 60)
        pool = WorkerPool(q, lambda item: None, threads=1)
        pool.stop()  # the run ends at once, with both items still waiting
        with caplog.at_level(logging.INFO, logger="ackqueue"):
            stats = pool.run()
    assert (stats.done, stats.stopped_by) == (0, "stop()")
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("finished:")]
    assert "queue: 2 ready, 0 held" in line, line


def put_with_unloadable(path, module, goods, every=3, **options):
    """``goods`` with an instance of ``module.Gone`` before every ``every``-th of them and at
    the head: once the class is removed, those items cannot be loaded. Returns how many."""
    gone = 0
    with ackqueue.AckQueue(path, **options) as q:
        for n in goods:
            if n % every == 0:
                q.put(module.Gone())
                gone += 1
            q.put(n)
    return gone


def test_an_item_that_cannot_be_loaded_goes_to_the_dead_letters_and_the_pool_goes_on(
    qpath, vanishing_class, caplog
):
    """The queue buries an item whose class is gone at the pool's get, which raises
    ItemLoadError: the feeder took that for its own failure and stopped the pool by an
    error, items left unhandled. With a prefetch of 1 every such item is at the head of a
    get, so each raises there."""
    module, remove = vanishing_class
    gone = put_with_unloadable(qpath, module, range(12))
    remove()
    handled = []
    caplog.set_level(logging.WARNING, logger="ackqueue")
    with ackqueue.AckQueue(qpath) as q:
        stats = WorkerPool(q, handled.append, threads=2, prefetch=1).run_until_empty()
        assert (stats.stopped_by, stats.done, stats.failed, stats.dead) == (None, 12, 0, gone)
        letters = q.dead_letters()
        assert (q.qsize(), q.unacked_count()) == (0, 0)
    assert sorted(handled) == list(range(12))
    assert len(letters) == gone and all("cannot load" in d.reason for d in letters)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("feeder failed" in m for m in messages), messages
    assert sum("cannot load" in m and "dead letters" in m for m in messages) >= 1, messages
