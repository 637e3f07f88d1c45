"""One worker process of a :class:`~ackqueue.workers.processes.ProcessPool`: it opens the queue
with ``shared=True``, runs a :class:`~ackqueue.workers.pool.WorkerPool` on it in its main thread
(so SIGINT and SIGTERM stop it gracefully, as they stop a pool in one process), and publishes
its counts in memory its parent reads, so that they survive even a SIGKILL of this process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import Any

from ackqueue.workers.pool import Handler, PoolStats, Retry, WorkerPool

# Slots of a child's shared counts: done, failed, dead, how its run ended, and whether it got
# as far as opening the queue (a child that dies before that will not do better restarted).
DONE, FAILED, DEAD, ENDED, OPENED = range(5)
SLOTS = 5
# ENDED: still running, ended by itself (or stop()), ended by an error or a signal.
RUNNING, FINISHED, FAILED_RUN, SIGNALLED = range(4)
# Seconds between copies of the counts to the parent, and between checks that it lives.
PUBLISH_INTERVAL = 0.1


@dataclass(frozen=True)
class Job:
    """What every worker process is given: picklable, since it crosses to a fresh
    interpreter (``spawn``)."""

    where: str
    kind: type[Any]
    name: str
    options: dict[str, Any]
    handler: Handler
    threads: int
    retry: Retry | None
    prefetch: int | None
    stop_timeout: float
    log_interval: float
    poll: float
    until_empty: bool
    log_level: int = logging.WARNING  # the parent's level for the ackqueue logger


def publish(stats: PoolStats, counts: MutableSequence[int]) -> None:
    counts[DONE], counts[FAILED], counts[DEAD] = stats.done, stats.failed, stats.dead


def ended_code(stats: PoolStats) -> int:
    if stats.interrupted:
        return SIGNALLED
    return FAILED_RUN if stats.stopped_by == "error" else FINISHED


def main(job: Job, counts: MutableSequence[int], parent: int) -> None:
    """The worker process: work on ``job`` until the queue is drained (``until_empty``), a
    signal from the parent, or the parent's death."""
    # A process group of its own: a Ctrl-C in the terminal reaches the parent only, which
    # passes each signal on once (two SIGINTs here would be "stop at once").
    os.setpgrp()
    # A fresh interpreter has no logging set up: log what the parent's ackqueue logger would,
    # to the stderr it shares with the parent, each line naming this process.
    logging.getLogger("ackqueue").setLevel(job.log_level)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s ackqueue worker process %(process)d: %(message)s")
    queue = job.kind(job.where, shared=True, name=job.name, **job.options)
    try:
        pool = WorkerPool(queue, job.handler, job.threads, job.retry,
                          stop_timeout=job.stop_timeout, log_interval=job.log_interval,
                          poll=job.poll, prefetch=prefetch_of(job, queue))
        counts[OPENED] = 1
        finished = threading.Event()
        watcher = threading.Thread(target=_watch, args=(pool, counts, parent, finished),
                                   name="ackqueue-process-watch", daemon=True)
        watcher.start()
        try:
            stats = pool.run_until_empty() if job.until_empty else pool.run()
        finally:
            finished.set()
            watcher.join()
            publish(pool.stats, counts)
        counts[ENDED] = ended_code(stats)
    finally:
        queue.close()


def prefetch_of(job: Job, queue: Any) -> int | None:
    """The prefetch given, else one item a thread on a queue with ``max_attempts`` (None: the
    WorkerPool's default). A delivery counts when an item is prefetched, and a handler that
    kills this process would spend an attempt of every item read ahead with its own: a poison
    item killing ``max_attempts`` processes would bury innocent items with it."""
    if job.prefetch is None and getattr(queue, "max_attempts", None) is not None:
        return job.threads
    return job.prefetch


def _watch(pool: WorkerPool[Any], counts: MutableSequence[int], parent: int,
           finished: threading.Event) -> None:
    """Copy the counts for the parent; stop the pool if the parent is gone (its items then go
    back to the queue, rather than a worker running on with nobody to stop it)."""
    while not finished.wait(PUBLISH_INTERVAL):
        publish(pool.stats, counts)
        if os.getppid() != parent:
            pool.stop()
