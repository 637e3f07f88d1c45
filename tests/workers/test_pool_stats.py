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
