"""A pool of worker threads over a queue: ack on success, retry with backoff, stop on a signal.

Two feeder threads each own a consumer (a consumer belongs to the thread that connected it):
they prefetch items in batches (``get_many``) into an in-memory buffer that the worker threads
take from, and each settles what the workers hand back for it: every success since its last
commit in one ``ack_many`` (one commit, one fsync), failures by ``nack`` with an exponential
backoff delay, or to the dead letters once an item has been delivered ``max_attempts`` times.
Handlers never wait on a commit: while a feeder commits, the workers go on with the buffer, and
while one feeder waits for its fsync (which releases the GIL) the other gets and settles. A job
counts as done only once its ack is durable.

On SIGINT or SIGTERM the pool stops taking new items, gives back what is buffered and lets
running handlers finish; a second SIGINT stops at once. Either way nothing is lost: what the
pool holds and has not acked goes back to the queue (at once, or at the next open if the
process is gone), and nothing it acked comes back.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Generic, TypeVar

from ackqueue.queue.queues import AckQueue
from ackqueue.workers.board import ABANDONED, MOST_PREFETCH, UNSTARTED, Board, buffered_fate
from ackqueue.workers.feeder import Feeder
from ackqueue.workers.options import check_pool_arguments, check_pool_options, default_prefetch
from ackqueue.workers.retry import Retry, warn_if_capped
from ackqueue.workers.stats import PoolStats

__all__ = ["Handler", "PoolStats", "Retry", "WorkerPool"]

log = logging.getLogger("ackqueue")

Handler = Callable[[Any], object]
T = TypeVar("T")

# Feeder threads (each with its consumer): while one waits for its commit's fsync, which
# releases the GIL, the other gets and settles.
FEEDERS = 2


class WorkerPool(Generic[T]):
    """``threads`` worker threads calling ``handler(item)`` for each item of ``queue``, an open
    :class:`~ackqueue.AckQueue` (a path is a ``TypeError``: open it first, or give it to a
    :class:`~ackqueue.ProcessPool`).

    ``queue`` is an :class:`~ackqueue.AckQueue` (or a subclass). When ``handler`` returns,
    the item is acked; when it raises, the item is nacked with the delay ``retry`` gives (a
    :class:`~ackqueue.Retry`; default ``Retry()``), and dead-lettered after ``max_attempts``.
    ``poll`` is how often, in seconds, idle threads look again for a stop or a due retry.

    ``run()`` works until :meth:`stop` (or SIGINT/SIGTERM when called from the main thread);
    ``run_until_empty()`` also returns once the queue is empty (items that their group's rules
    hold back count as waiting) and no retry is pending. A :meth:`stop` while no run is under
    way stops the next one, which returns at once; a pool can be run again after a run ends.
    Both return the :class:`PoolStats` of that run alone (each run counts from zero; ``stats``
    shows the running or last run's), whose ``stopped_by`` and ``exit_code`` tell a finished
    run from an interrupted one. ``stop_timeout`` bounds how long a graceful stop waits for running
    handlers; items still held then go back to the queue. Progress is logged through the
    ``ackqueue`` logger every ``log_interval`` seconds.

    Feeder threads, each owning a consumer (a consumer belongs to the thread that connected
    it), prefetch items with ``get_many`` into a buffer the workers share and settle what the
    workers hand back, all successes since their last commit in one ``ack_many``; handlers
    never wait on a commit. ``prefetch`` is how many items the pool holds ahead of its
    workers (default: 32 a thread, growing up to 1,024 while jobs are done fast enough to use
    them within 0.05 s; one a thread when the queue has an ``ack_timeout``, whose lease runs
    from the get). Prefetched items are held (``q.unacked_count()`` counts them)
    and go back to the queue when the pool stops; with ``max_attempts`` set, a delivery
    counts when an item is prefetched, and is given back uncounted, in the item's place, if no
    handler ran it (the pool stopped first, or its lease ran out while buffered): a stop never
    sends to the dead letters what the pool only prefetched. An item whose lease ran out while
    buffered is given back without running its handler.
    """

    def __init__(
        self,
        queue: AckQueue[T],
        handler: Callable[[T], object],
        threads: int = 8,
        retry: Retry | None = None,
        *,
        stop_timeout: float = 30.0,
        log_interval: float = 10.0,
        poll: float = 0.2,
        prefetch: int | None = None,
    ) -> None:
        if not isinstance(queue, AckQueue):
            raise TypeError(
                f"queue must be an open AckQueue, not {queue!r}: WorkerPool(AckQueue(path), "
                "handler) (or ProcessPool(path, handler), whose processes each open the path)"
            )
        check_pool_arguments(handler, "threads", threads, "thread", retry)
        check_pool_options(prefetch, stop_timeout, poll, log_interval)
        self.queue = queue
        self.handler = handler
        self.threads = threads
        self.retry = retry or Retry()
        warn_if_capped(self.retry, queue.max_attempts)
        self.stop_timeout = stop_timeout
        self.log_interval = log_interval
        self.poll = poll
        leased = getattr(queue, "ack_timeout", None) is not None
        self.prefetch = default_prefetch(prefetch, threads, leased)
        # Given or leased: fixed. Else it may grow with the rate (see board.AHEAD_SECONDS).
        self._most_prefetch = 0 if prefetch or leased else MOST_PREFETCH
        # The next run's board (then the running one's): a stop() before run() is kept on it.
        self._board = self._new_board()
        self.stats = self._board.stats  # the last run's, or the running one's
        self._feeders: list[Feeder] = []
        self._workers: list[threading.Thread] = []
        self._interrupts = 0
        self._signalled: str | None = None  # set by the signal handler, acted on by _supervise

    # -- running -------------------------------------------------------------------------------

    def run(self) -> PoolStats:
        """Work until stopped or the queue is shut down and drained; returns the counts.

        Handles SIGINT/SIGTERM when called from the main thread.
        """
        return self._run(until_empty=False)

    def run_until_empty(self) -> PoolStats:
        """Work until the queue is empty, nothing is held and no retry of ours is pending.

        A signal or :meth:`stop` ends it earlier: the returned stats' ``stopped_by`` says so.
        """
        return self._run(until_empty=True)

    def stop(self) -> None:
        """Ask the pool to stop: no new items are taken; running handlers finish. Called
        while no run is under way, it stops the next run, which returns at once."""
        self._stop("stop()")

    @property
    def stopping(self) -> bool:
        """True once a stop of the running (or next) run was asked for (:meth:`stop` or a
        signal)."""
        return self._board.stopping.is_set()

    def _stop(self, by: str | None) -> None:
        self._board.stop(by)

    def _run(self, until_empty: bool) -> PoolStats:
        # The board made when the last run ended (or at construction): a stop() asked since
        # is on it already, and ends this run at once.
        board = self._board
        self._signalled = None
        self._interrupts = 0
        # This run's counts start from zero; what an earlier run returned stays as it was.
        self.stats = board.stats
        board.begin()
        try:
            restore = self._install_signal_handlers()
            started = time.monotonic()
            try:
                self._start_threads(until_empty)
                self._supervise(started)
                self._join_threads()
            except KeyboardInterrupt:
                # The second Ctrl-C: give back what is held now. Handlers still running
                # cannot ack afterwards (their items were given back), so nothing is lost or
                # doubled beyond an item whose handler finished but whose ack had not
                # committed.
                self._stop("SIGINT")
                self.stats.stopped_by = "SIGINT"
                self._release_all()
                log.warning("stopped at once; held items went back to the queue")
                raise
            finally:
                restore()
            # A signal the supervisor had not acted on yet when the run drained on its own
            # still ends it as interrupted: the user asked to stop, and a script running it
            # must.
            board.count_dead()
            self.stats.stopped_by = board.stopped_by or self._signalled
            self._log_progress(started, final=True)
            return self.stats
        finally:
            # From here a stop() is for the next run (this one's board stays stopped).
            self._board = self._new_board()

    def _new_board(self) -> Board:
        return Board(self.queue, self.threads, self.prefetch, PoolStats(),
                     most=self._most_prefetch)

    def _start_threads(self, until_empty: bool) -> None:
        board = self._board
        self._feeders = [Feeder(n, board, self.retry, self.poll) for n in range(FEEDERS)]
        board.feeders = list(self._feeders)
        for feeder in self._feeders:
            feeder.start(until_empty)
        self._workers = [
            threading.Thread(target=self._work, args=(n,), name=f"ackqueue-worker-{n}",
                             daemon=True)
            for n in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()

    def _supervise(self, started: float) -> None:
        last_log = time.monotonic()
        while not self._board.stopping.wait(self.poll):
            if self._signalled is not None:
                self._stop(self._signalled)
                break
            if not all(feeder.alive for feeder in self._feeders):
                self._stop(None)
                break
            if time.monotonic() - last_log >= self.log_interval:
                self._log_progress(started)
                last_log = time.monotonic()

    def _join_threads(self) -> None:
        busy = sum(self._board.running)
        if busy:
            log.info("stopping: waiting up to %.0f s for %d running handler(s)",
                     self.stop_timeout, busy)
        deadline = time.monotonic() + self.stop_timeout
        for thread in [*self._workers, *(f.thread for f in self._feeders)]:
            # Short waits so that a second Ctrl-C is seen at once.
            while thread is not None and thread.is_alive() and time.monotonic() < deadline:
                thread.join(0.1)
        late = [w.name for w in self._workers if w.is_alive()]
        if late:
            log.warning("%d handler(s) still running after %.0f s; their items go back to the "
                        "queue", len(late), self.stop_timeout)
            self._release_all()
            for feeder in self._feeders:
                feeder.wake.set()
                if feeder.thread is not None:
                    feeder.thread.join(self.stop_timeout)

    def _release_all(self) -> None:
        for feeder in self._feeders:
            feeder.release()

    # -- one worker ------------------------------------------------------------------------------

    def _work(self, index: int) -> None:
        board = self._board
        buffer, running = board.buffer, board.running
        stopping = board.stopping
        handler = self.handler
        lease = getattr(self.queue, "ack_timeout", None)
        may_be_void = getattr(self.queue, "_may_be_void", lambda taken_at: False)
        try:
            while not stopping.is_set():
                try:
                    item, got_at, feeder = buffer.popleft()
                except IndexError:
                    board.wait_for_items(self.poll)
                    continue
                if buffer and board.waiting:
                    board.wake_one()  # more is left: pass the wake-up on
                fate = buffered_fate(feeder.consumer, item, got_at, lease, may_be_void)
                if fate == "drop":
                    continue
                if fate == "give back":
                    outcome: object = UNSTARTED
                else:
                    running[index] = True
                    try:
                        handler(item)
                        outcome = None
                    except Exception as exc:
                        outcome = exc
                    except BaseException:
                        # SystemExit and the like end this worker thread, as they would end
                        # a thread of its own; its item goes back, this delivery counted.
                        feeder.hand_back(item, ABANDONED)
                        log.exception("worker %d ended by its handler on item %r; the item "
                                      "goes back to the queue", index, item)
                        return
                    finally:
                        running[index] = False
                feeder.hand_back(item, outcome)
        finally:
            with board.lock:
                board.workers_left -= 1
                last = board.workers_left == 0 and not stopping.is_set()
            if last:
                log.error("every worker of the pool ended; stopping the pool")
                board.stop("error")
            for each in board.feeders:
                each.wake.set()

    # -- signals and progress ------------------------------------------------------------------

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._interrupts += 1
        if self._interrupts > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        log.warning("%s: stopping after running handlers finish (Ctrl-C again to stop at once)",
                    name)
        # No lock here: the handler runs in the main thread between any two bytecodes, maybe
        # while that thread holds an Event's lock. The supervisor acts on it within ``poll``.
        if self._signalled is None:
            self._signalled = name

    def _log_progress(self, started: float, final: bool = False) -> None:
        elapsed = max(1e-9, time.monotonic() - started)
        with self._board.lock:
            done, failed, dead = self.stats.done, self.stats.failed, self.stats.dead
        log.info(
            "%s%d done (%.1f/s), %d failed, %d dead; queue: %d ready, %d held",
            "finished: " if final else "", done, done / elapsed, failed, dead,
            self.queue._ready_total(), self.queue.unacked_count(),
        )
