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

import collections
import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ackqueue.errors import Empty, NotHeldError, QueueClosedError, ShutDown
from ackqueue.queue.consumer import Consumer

log = logging.getLogger("ackqueue")

Handler = Callable[[Any], object]

# A queue that was shut down (``q.shutdown()``) and has nothing left ends the feeder's loop.
_ENDED: tuple[type[BaseException], ...] = (QueueClosedError, ShutDown)

# What a worker hands back to the feeder for one item: None for success, the exception for a
# failure, _UNSTARTED for an item it gives back without running the handler.
_UNSTARTED = object()

# Seconds a feeder may wait for more results before a commit of only a few acks.
LINGER = 0.002
# Feeder threads (each with its consumer): while one waits for its commit's fsync, which
# releases the GIL, the other gets and settles.
FEEDERS = 2


class _Feeder:
    """One feeder thread's own state: its consumer, and the results workers hand back to it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.consumer: Consumer[Any] | None = None
        self.results: collections.deque[tuple[Any, object]] = collections.deque()
        self.wake = threading.Event()  # results are waiting, or the pool is stopping
        self.thread: threading.Thread | None = None


@dataclass(frozen=True)
class Retry:
    """Exponential backoff: the n-th failure waits ``base * factor**(n-1)`` seconds.

    The wait is capped at ``max_delay`` and spread by up to ``jitter`` (a fraction) so that
    items failing together do not come back together. ``max_attempts`` (if set) overrides the
    queue's own: an item that failed this many deliveries goes to the dead letters.
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    max_attempts: int | None = None

    def delay(self, attempts: int) -> float:
        """Seconds to wait before the next delivery, after ``attempts`` failed deliveries."""
        wait = min(self.max_delay, self.base * self.factor ** max(0, attempts - 1))
        return wait * (1 + random.uniform(-self.jitter, self.jitter)) if self.jitter else wait


@dataclass
class PoolStats:
    """What a pool has done so far, and why its last run ended.

    ``done`` counts jobs whose ack is durable. ``stopped_by`` is None when the run ended by
    itself (``run_until_empty()`` found the queue drained, or the queue was shut down and
    drained), else what stopped it: ``"SIGINT"``, ``"SIGTERM"``, ``"stop()"``, or
    ``"error"`` (every worker thread ended by a ``BaseException`` from the handler, or the
    feeder failed; the log says which).
    """

    done: int = 0
    failed: int = 0
    dead: int = 0
    stopped_by: str | None = None

    @property
    def interrupted(self) -> bool:
        """Whether a signal (Ctrl-C, SIGTERM) ended the run before its work was done."""
        return self.stopped_by in ("SIGINT", "SIGTERM")

    @property
    def exit_code(self) -> int:
        """A process exit status saying how the run ended, as a shell reports a signal:
        0 when it ended by itself or by ``stop()``, 128 + the signal number when a signal
        stopped it (130 for Ctrl-C, 143 for SIGTERM), 1 when an error stopped it."""
        if self.interrupted:
            return 128 + int(signal.Signals[str(self.stopped_by)])
        return 1 if self.stopped_by == "error" else 0


class WorkerPool:
    """``threads`` worker threads calling ``handler(item)`` for each item of ``queue``.

    ``run()`` works until :meth:`stop` (or SIGINT/SIGTERM when called from the main thread);
    ``run_until_empty()`` also returns once the queue is empty and no retry is pending. Both
    return :class:`PoolStats`, whose ``stopped_by`` and ``exit_code`` tell a finished run from
    an interrupted one. ``stop_timeout`` bounds how long a graceful stop waits for running
    handlers; items still held then go back to the queue. Progress is logged through the
    ``ackqueue`` logger every ``log_interval`` seconds.

    Feeder threads, each owning a consumer (a consumer belongs to the thread that connected
    it), prefetch items with ``get_many`` into a buffer the workers share and settle what the
    workers hand back, all successes since their last commit in one ``ack_many``; handlers
    never wait on a commit. ``prefetch`` is how many items the pool holds ahead of its
    workers (default: 32 a thread; one a thread when the queue has an ``ack_timeout``, whose
    lease runs from the get). Prefetched items are held (``q.unacked_count()`` counts them)
    and go back to the queue when the pool stops; with ``max_attempts`` set, a delivery
    counts when an item is prefetched. An item whose lease ran out while buffered is given
    back without running its handler.
    """

    def __init__(
        self,
        queue: Any,
        handler: Handler,
        threads: int = 8,
        retry: Retry | None = None,
        *,
        stop_timeout: float = 30.0,
        log_interval: float = 10.0,
        poll: float = 0.2,
        prefetch: int | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError("a pool needs at least one thread")
        if prefetch is not None and prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.queue = queue
        self.handler = handler
        self.threads = threads
        self.retry = retry or Retry()
        self.stop_timeout = stop_timeout
        self.log_interval = log_interval
        self.poll = poll
        # A lease runs from the get: with one, read ahead only as far as the workers reach.
        leased = getattr(queue, "ack_timeout", None) is not None
        self.prefetch = prefetch or (threads if leased else 32 * threads)
        self._ack_batch = max(1, self.prefetch // 4)
        self.linger = LINGER
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped_by: str | None = None
        self._retry_due = 0.0
        self._feeders: list[_Feeder] = []
        self._workers: list[threading.Thread] = []
        self._interrupts = 0
        self._signalled: str | None = None  # set by the signal handler, acted on by _supervise
        # The buffer: (item, monotonic time it was got, its feeder). Workers popleft, feeders
        # append; deque operations are atomic, so neither side takes a lock per item.
        self._buffer: collections.deque[tuple[Any, float, _Feeder]] = collections.deque()
        self._refilled = threading.Event()  # a feeder added to the buffer, or is stopping
        self._running: list[bool] = []  # per worker: is a handler running now
        self._workers_left = 0
        self._feeders_busy = 0  # feeders in a get or a settlement now (under _lock)

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
        """Ask the pool to stop: no new items are taken; running handlers finish."""
        self._stop("stop()")

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _stop(self, by: str | None) -> None:
        if not self._stopping.is_set() and self._stopped_by is None:
            self._stopped_by = by
        self._stopping.set()
        self._refilled.set()
        for feeder in self._feeders:
            feeder.wake.set()

    def _run(self, until_empty: bool) -> PoolStats:
        self._stopping.clear()
        self._stopped_by = None
        self._signalled = None
        self._interrupts = 0
        self.stats.stopped_by = None
        restore = self._install_signal_handlers()
        started = time.monotonic()
        try:
            self._start_threads(until_empty)
            self._supervise(started)
            self._join_threads()
        except KeyboardInterrupt:
            # The second Ctrl-C: give back what is held now. Handlers still running cannot
            # ack afterwards (their items were given back), so nothing is lost or doubled
            # beyond an item whose handler finished but whose ack had not committed.
            self._stop("SIGINT")
            self.stats.stopped_by = "SIGINT"
            self._release_all()
            log.warning("stopped at once; held items went back to the queue")
            raise
        finally:
            restore()
        self.stats.stopped_by = self._stopped_by
        self._log_progress(started, final=True)
        return self.stats

    def _start_threads(self, until_empty: bool) -> None:
        self._buffer.clear()
        self._running = [False] * self.threads
        self._workers_left = self.threads
        self._feeders_busy = 0
        self._feeders = [_Feeder(n) for n in range(FEEDERS)]
        for feeder in self._feeders:
            connected = threading.Event()
            feeder.thread = threading.Thread(
                target=self._feed, args=(feeder, connected, until_empty),
                name=f"ackqueue-pool-feeder-{feeder.index}", daemon=True,
            )
            feeder.thread.start()
            connected.wait()
        self._workers = [
            threading.Thread(target=self._work, args=(n,), name=f"ackqueue-worker-{n}",
                             daemon=True)
            for n in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()

    def _supervise(self, started: float) -> None:
        last_log = time.monotonic()
        while not self._stopping.wait(self.poll):
            if self._signalled is not None:
                self._stop(self._signalled)
                break
            if not all(f.thread is not None and f.thread.is_alive() for f in self._feeders):
                self._stop(None)
                break
            if time.monotonic() - last_log >= self.log_interval:
                self._log_progress(started)
                last_log = time.monotonic()

    def _join_threads(self) -> None:
        busy = sum(self._running)
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

    def _is_drained(self) -> bool:
        """Whether nothing is left: asked by a feeder with nothing of ours in flight; the
        lock keeps the other feeders from starting a get or a settlement meanwhile, so no
        claim of ours is under way (a claimed item is neither ready nor held until its get
        returns) and no retry is being scheduled."""
        with self._lock:
            if self._feeders_busy or time.time() < self._retry_due:
                return False
            return bool(self.queue.qsize() == 0 and self.queue.unacked_count() == 0)

    def _release_all(self) -> None:
        for feeder in self._feeders:
            if feeder.consumer is not None:
                feeder.consumer.close()  # allowed from any thread: what it holds goes back

    # -- the feeder: the one thread that gets and settles ----------------------------------------

    def _feed(self, feeder: _Feeder, connected: threading.Event, until_empty: bool) -> None:
        try:
            consumer = feeder.consumer = self.queue.connect()
        finally:
            connected.set()
        try:
            with consumer:
                self._feed_loop(feeder, consumer, until_empty)
        except _ENDED:
            pass  # the queue was closed under us: what we held went back with it
        except Exception:
            log.exception("the pool's feeder failed; stopping the pool")
            self._stop("error")
        finally:
            self._stop(self._stopped_by)

    def _feed_loop(self, feeder: _Feeder, consumer: Consumer[Any], until_empty: bool) -> None:
        ended = False  # the queue was shut down and has nothing left for us
        wake = feeder.wake
        while True:
            wake.clear()
            self._settle(feeder, consumer)
            if consumer.closed:
                return
            if self._stopping.is_set():
                self._give_back_buffer()
                if self._workers_left == 0 and not feeder.results and not self._buffer:
                    self._settle(feeder, consumer)  # what the last giving back sent us
                    return
                wake.wait(self.poll)
                continue
            idle = not self._in_flight()
            if idle and (ended or until_empty and self._is_drained()):
                self._stop(None)
                continue
            if not ended:
                try:
                    if self._refill(feeder, consumer, block=False) or not idle:
                        wake.wait(0 if feeder.results else self.poll)
                        continue
                    # Idle: one feeder waits for the queue itself (results cannot come
                    # meanwhile); two waiting in turn would never let _is_drained() see
                    # no get under way.
                    if feeder.index == 0:
                        self._refill(feeder, consumer, block=True)
                        continue
                except _ENDED:
                    ended = True
                    continue
            wake.wait(self.poll)

    def _in_flight(self) -> bool:
        return bool(
            self._buffer or any(f.results for f in self._feeders) or any(self._running)
        )

    def _refill(self, feeder: _Feeder, consumer: Consumer[Any], block: bool) -> bool:
        """Top the buffer up to ``prefetch``; whether anything was added.

        Only an idle pool blocks (up to ``poll``): otherwise results that come back
        meanwhile would wait for their ack.
        """
        room = self.prefetch - len(self._buffer) - sum(self._running)
        if room < 1 or (self._buffer and room < self.prefetch // 2):
            return False
        with self._lock:
            self._feeders_busy += 1
        try:
            # Each feeder takes its share, so that the other finds some left to take.
            items = consumer.get_many(max(1, room // len(self._feeders)), timeout=self.poll,
                                      block=block)
        except Empty:
            return False
        finally:
            with self._lock:
                self._feeders_busy -= 1
        now = time.monotonic()
        self._buffer.extend([(item, now, feeder) for item in items])
        self._refilled.set()
        return True

    def _settle(self, feeder: _Feeder, consumer: Consumer[Any]) -> None:
        """Settle what the workers handed back: all successes in one durable commit."""
        results = feeder.results
        if not results:
            return
        # A few results and a full buffer: wait a moment for more, so that a commit carries
        # many acks (each commit's CPU holds the GIL the workers need).
        if len(results) < self._ack_batch and len(self._buffer) > self.prefetch // 4:
            time.sleep(self.linger)
        # Counted busy before the results leave the deque: another feeder asking whether the
        # pool is drained must not miss a nack with a delay that is under way.
        with self._lock:
            self._feeders_busy += 1
        try:
            acks: list[Any] = []
            others: list[tuple[Any, object]] = []
            while results:
                item, outcome = results.popleft()
                if outcome is None:
                    acks.append(item)
                else:
                    others.append((item, outcome))
            if acks:
                self._ack(consumer, acks)
            for item, outcome in others:
                self._settle_one(consumer, item, outcome)
        finally:
            with self._lock:
                self._feeders_busy -= 1

    def _ack(self, consumer: Consumer[Any], items: list[Any]) -> None:
        try:
            consumer.ack_many(items)
        except NotHeldError:
            # Some were taken back (a lease ran out, a forced stop): ack the others one by one.
            done = 0
            for item in items:
                try:
                    consumer.ack(item)
                except NotHeldError:
                    continue
                done += 1
            with self._lock:
                self.stats.done += done
            return
        with self._lock:
            self.stats.done += len(items)

    def _settle_one(self, consumer: Consumer[Any], item: Any, outcome: object) -> None:
        """Give back an unstarted item, or retry or bury a failed one."""
        try:
            if isinstance(outcome, Exception):
                self._failed(consumer, item, outcome)
            else:
                consumer.nack(item)
        except NotHeldError:
            pass  # given back (forced stop, lease ran out) while the handler ran
        except QueueClosedError:
            raise
        except Exception:  # a nack failed: the item stays held, and goes back at close
            log.exception("settling item %r failed", item)

    def _give_back_buffer(self) -> None:
        """Hand every buffered item back to its feeder, which gives it back to the queue."""
        while True:
            try:
                item, _, owner = self._buffer.popleft()
            except IndexError:
                return
            owner.results.append((item, _UNSTARTED))
            owner.wake.set()

    def _failed(self, consumer: Consumer[Any], item: Any, exc: Exception) -> None:
        attempts = consumer.delivery(item).attempts
        limit = self.retry.max_attempts or self.queue.max_attempts
        if limit and attempts >= limit:
            consumer.reject(item, reason=f"{type(exc).__name__}: {exc}")
            with self._lock:
                self.stats.failed += 1
                self.stats.dead += 1
            log.error("item %r failed %d time(s), sent to the dead letters: %s",
                      item, attempts, exc, exc_info=exc)
            return
        delay = self.retry.delay(attempts)
        consumer.nack(item, delay=delay)
        with self._lock:
            self._retry_due = max(self._retry_due, time.time() + delay)
            self.stats.failed += 1
        log.warning("item %r failed (attempt %d), retry in %.2f s: %s",
                    item, attempts, delay, exc)

    # -- one worker ------------------------------------------------------------------------------

    def _work(self, index: int) -> None:
        buffer, running = self._buffer, self._running
        refilled, stopping = self._refilled, self._stopping
        handler = self.handler
        lease = getattr(self.queue, "ack_timeout", None)
        try:
            while not stopping.is_set():
                try:
                    item, got_at, feeder = buffer.popleft()
                except IndexError:
                    # Clear before looking again: a refill between the two is not missed.
                    refilled.clear()
                    if not buffer and not stopping.is_set():
                        refilled.wait(self.poll)
                    continue
                if lease is not None and time.monotonic() - got_at >= lease:
                    outcome: object = _UNSTARTED  # taken back already: another may have it
                else:
                    running[index] = True
                    try:
                        handler(item)
                        outcome = None
                    except Exception as exc:
                        outcome = exc
                    except BaseException:
                        # SystemExit and the like end this worker thread, as they would end
                        # a thread of its own; its item goes back.
                        feeder.results.append((item, _UNSTARTED))
                        feeder.wake.set()
                        log.exception("worker %d ended by its handler on item %r; the item "
                                      "goes back to the queue", index, item)
                        return
                    finally:
                        running[index] = False
                feeder.results.append((item, outcome))
                if not feeder.wake.is_set():
                    feeder.wake.set()
        finally:
            with self._lock:
                self._workers_left -= 1
                if self._workers_left == 0 and not stopping.is_set():
                    log.error("every worker of the pool ended; stopping the pool")
                    self._stop("error")
            for each in self._feeders:
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
        with self._lock:
            done, failed, dead = self.stats.done, self.stats.failed, self.stats.dead
        log.info(
            "%s%d done (%.1f/s), %d failed, %d dead; queue: %d ready, %d held",
            "finished: " if final else "", done, done / elapsed, failed, dead,
            self.queue.qsize(), self.queue.unacked_count(),
        )
