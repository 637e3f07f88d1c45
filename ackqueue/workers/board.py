"""What a worker pool's feeders and workers share while it runs: the buffer of prefetched
items, which workers are running a handler, the counts, and the stop flag; and what becomes of
a buffered item, down to giving back those no handler ran (the asyncio pool's too)."""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

from ackqueue.errors import ItemLoadError, NotHeldError, QueueClosedError
from ackqueue.queue.consumer import Consumer
from ackqueue.workers.stats import DeadLetterCount, PoolStats

log = logging.getLogger("ackqueue")

# Without a prefetch given, a pool holds about this many seconds of work ahead of its workers,
# at the rate its jobs were done lately, between its floor (32 a thread) and MOST_PREFETCH.
# Each get and each ack commit has a fixed cost (a commit, an fsync and the kernel's work
# behind it, the reader catching up), and a feeder's batches are a fraction of the prefetch,
# so the prefetch sets the cost per job of fast handlers: on a no-op burn-down with 8 threads,
# 1,024 instead of 256 took commits from 8 to 2 per 1,000 jobs and CPU per job from 51 to
# 39 µs (200,000 items). Slow handlers keep the floor, so a pool never holds much more work
# than it does in a moment, which other processes of a shared queue could have taken. With
# 0.1 s the 1 ms handler (about 5,000 jobs/s with 8 threads) grew to 500 and lost a little
# (73 against 75 % of threads that only sleep, 3 rounds): bigger commits hold the GIL longer
# while sleeping handlers wait to come back. With 0.05 s it stays near its floor.
AHEAD_SECONDS = 0.05
MOST_PREFETCH = 1024
RATE_WINDOW = 0.05  # seconds over which the rate is measured
# How long past the last retry's due time a run waits for the queue to count it ready, while
# any item is delayed (see Board.is_drained).
RETRY_SETTLE_SECONDS = 1.0


class Settler(Protocol):
    """What the board needs of a feeder: where workers hand results back to it."""

    results: collections.deque[tuple[Any, object]]
    wake: threading.Event
    consumer: Any  # what it holds its items on (see buffered_fate)

    def hand_back(self, item: Any, outcome: object) -> None: ...


class Board:
    """The state of one run of a pool, shared by its feeder and worker threads.

    Workers ``popleft`` from ``buffer`` and feeders ``extend`` it; deque operations are
    atomic, so neither side takes a lock per item. ``lock`` guards the counts, ``busy`` and
    ``retry_due``. ``prefetch`` is how many items to hold ahead now: fixed unless ``most`` is
    above it, else adapted to the rate jobs are done (see :data:`AHEAD_SECONDS`).
    """

    def __init__(
        self,
        queue: Any,
        threads: int,
        prefetch: int,
        stats: PoolStats,
        most: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self.prefetch = self._least = prefetch
        self._most = max(prefetch, most)
        self._clock = clock
        self._mark = (clock(), stats.done)  # (when, done then): the rate's start
        self.stats = stats
        self._dead = DeadLetterCount(queue)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.stopped_by: str | None = None
        # (item, monotonic time it was got, its feeder), in delivery order.
        self.buffer: collections.deque[tuple[Any, float, Settler]] = collections.deque()
        # Workers waiting for the buffer to fill, woken one at a time (see wake_one).
        self._ready = threading.Condition(threading.Lock())
        self.waiting = 0
        self.running = [False] * threads  # per worker: is a handler running now
        self.workers_left = threads
        self.feeders: list[Settler] = []
        self.busy = 0  # feeders in a get or a settlement now (under lock)
        self.retry_due = 0.0  # epoch time the last retry scheduled by this pool falls due

    def begin(self) -> None:
        """The run starts now (the board was made when the last one ended): its counts and
        its rate start from here."""
        with self.lock:
            self._dead = DeadLetterCount(self.queue)
            self._mark = (self._clock(), self.stats.done)

    def stop(self, by: str | None) -> None:
        """Stop the run (``by`` says why, if it is the first reason given); wakes everyone."""
        if not self.stopping.is_set() and self.stopped_by is None:
            self.stopped_by = by
        self.stopping.set()
        with self._ready:
            self._ready.notify_all()
        for feeder in self.feeders:
            feeder.wake.set()

    def wait_for_items(self, timeout: float) -> None:
        """Called by a worker that found the buffer empty: wait for an item (or a stop)."""
        with self._ready:
            self.waiting += 1
            try:
                if not self.buffer and not self.stopping.is_set():
                    self._ready.wait(timeout)
            finally:
                self.waiting -= 1

    def wake_one(self) -> None:
        """Wake one waiting worker, if any: called when items were added, and by a woken
        worker that took one and left more. Waking every worker at each refill cost 9 % of
        the GIL of a no-op burn-down (each woken thread preempts the one that holds the GIL),
        while a chain wakes only as many as find work."""
        if self.waiting:
            with self._ready:
                self._ready.notify()

    def in_flight(self) -> bool:
        """Whether any item is buffered, being handled, or handed back but not settled."""
        return bool(
            self.buffer or any(f.results for f in self.feeders) or any(self.running)
        )

    def at_rest(self) -> bool:
        """Whether nothing of the pool's is in flight and no feeder is in a get or a
        settlement (under the lock, which keeps another from starting one meanwhile)."""
        with self.lock:
            return not self.busy and not self.in_flight()

    def is_drained(self) -> bool:
        """Whether nothing is left: asked by a feeder with nothing of ours in flight; the
        lock keeps the other feeders from starting a get or a settlement meanwhile, so no
        claim of ours is under way (a claimed item is neither ready nor held until its get
        returns) and no retry is being scheduled."""
        with self.lock:
            if self.busy or time.time() < self.retry_due:
                return False
            # A retry that fell due is counted ready only once the queue's timer has moved it
            # (a moment after its time, longer on a busy machine): until then qsize() leaves it
            # out, and the run ended with it still waiting (examples/retry_with_backoff.py
            # under CI: its poison job never reached the dead letters).
            if (self.retry_due and time.time() < self.retry_due + RETRY_SETTLE_SECONDS
                    and self.queue.delayed_count()):
                return False
            # Not qsize(): it leaves out the items their group's rules hold back now (a cap,
            # an interval), and the run ended with every other group's turn still to come.
            return bool(self.queue._ready_total() == 0 and self.queue.unacked_count() == 0)

    def count(self, done: int = 0, failed: int = 0) -> None:
        with self.lock:
            self.stats.done += done
            self.stats.failed += failed
            self._count_dead_locked()
            if done and self._most > self._least:
                self._adapt_locked()

    def count_dead(self) -> None:
        """Bring ``stats.dead`` up to date (see :class:`DeadLetterCount`); done after each get
        and settlement, so that the burials of both, the queue's at a get included, show."""
        with self.lock:
            self._count_dead_locked()

    def _count_dead_locked(self) -> None:
        self.stats.dead = self._dead()

    def _adapt_locked(self) -> None:
        now = self._clock()
        then, done_then = self._mark
        if now - then < RATE_WINDOW:
            return
        rate = (self.stats.done - done_then) / (now - then)
        self._mark = (now, self.stats.done)
        self.prefetch = max(self._least, min(self._most, int(rate * AHEAD_SECONDS)))

    def enter(self) -> None:
        """A feeder starts a get or a settlement (see :meth:`is_drained`)."""
        with self.lock:
            self.busy += 1

    def leave(self) -> None:
        """A feeder's get or settlement ended: what it buried, if anything, counts."""
        with self.lock:
            self.busy -= 1
            self._count_dead_locked()

    def give_back_buffer(self) -> None:
        """Hand every buffered item back to its feeder, which gives it back to the queue."""
        while True:
            try:
                item, _, owner = self.buffer.popleft()
            except IndexError:
                return
            owner.hand_back(item, UNSTARTED)


# What a worker hands back to a feeder for one item: None for success, the exception for a
# failure, UNSTARTED for an item no handler ran (the pool stopped first, or its lease ran out
# while buffered): given back in its place without spending an attempt, so that stopping a
# pool never sends to the dead letters what it only prefetched; ABANDONED for an item whose
# handler started but ended its worker (SystemExit) or was cancelled: given back by a plain
# nack, whose delivery counts, so that such a handler still reaches ``max_attempts``.
UNSTARTED = object()
ABANDONED = object()


def give_back_unstarted(consumer: Consumer[Any], items: list[Any]) -> bool:
    """Give back ``items``, held by ``consumer`` and run by no handler, in one commit: each is
    ready again at once, in its place, and its delivery does not count against
    ``max_attempts`` (a snooze of no time; a plain nack would count it, and bury an item at
    its last attempt). One taken back meanwhile (a lease ran out, a forced stop) is skipped.

    Whether it committed: if not (one was taken back as the commit ran, the disk is full,
    ...), nothing did, and the pool settles each item as its own, with its own handling of
    each failure. A queue closed under the pool raises, as it does for every settlement.
    The asyncio pool runs it on one of its queue's threads.
    """
    try:
        with consumer.transaction():
            for item in items:
                with contextlib.suppress(NotHeldError):  # taken back meanwhile
                    consumer.snooze(item, 0)
        return True
    except QueueClosedError:
        raise
    except Exception:
        return False


def report_unloadable(exc: ItemLoadError) -> None:
    """Log an item a pool's get could not load (its class is gone, say). The queue moved it
    to the dead letters (``stats.dead`` counts it) and handed out nothing for it: the pool
    goes on with the next item, as it does after burying a failed one."""
    log.error("an item could not be loaded, so no handler ran it: %s", exc)


Fate = Literal["handle", "give back", "drop"]


def buffered_fate(
    consumer: Any, item: Any, got_at: float, lease: float | None,
    may_be_void: Callable[[float], bool],
) -> Fate:
    """What a pool's worker does with ``item``, got at ``got_at`` (``time.monotonic()``, after
    the get returned) and taken from the buffer now: handle it; give it back unstarted; or
    drop it, when its lease ran out meanwhile and the queue took it back (and may have
    delivered it again, to us too: a nack of this copy would find the new delivery of an
    equal item, a small int say, and give that back)."""
    if lease is not None and time.monotonic() - got_at >= lease:
        # Not taken back yet (the queue's timer is late, or its clock a manual one): ours.
        return "drop" if _lease_ran_out(consumer, item, got_at, lease) else "give back"
    if may_be_void(got_at):
        # This process was stopped past its shared session's lease: another may have it, or
        # have acked it; a nack, fenced, gives back only what is ours.
        return "give back"
    return "handle"


def _lease_ran_out(consumer: Any, item: Any, got_at: float, lease: float) -> bool:
    """Whether the hold on ``item`` got at ``got_at`` is gone: a hold the consumer finds for
    an equal item that was got later is another delivery, not this one."""
    got_wall = time.time() - (time.monotonic() - got_at)
    try:
        # A redelivery comes a whole lease after the first one: half of it tells them apart.
        return bool(consumer.delivery(item).got_at > got_wall + lease / 2)
    except NotHeldError:
        return True
