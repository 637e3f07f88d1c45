"""A pool of worker threads over a queue: ack on success, retry with backoff, stop on a signal.

Each worker holds one item at a time through its own consumer. When the handler returns, the
item is acked; when it raises, the item is nacked with an exponential backoff delay, or sent to
the dead letters once it has been delivered ``max_attempts`` times. On SIGINT or SIGTERM the
pool stops taking new items and lets running handlers finish; a second SIGINT stops at once.
Either way nothing is lost: what a worker still holds goes back to the queue (at once, or at
the next open if the process is gone).
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ackqueue import errors
from ackqueue.errors import Empty, NotHeldError, QueueClosedError
from ackqueue.queue.consumer import Consumer

log = logging.getLogger("ackqueue")

Handler = Callable[[Any], object]

# A queue that was shut down (``q.shutdown()``) and has nothing left ends the workers' loops.
_ENDED: tuple[type[BaseException], ...] = tuple(
    cls for cls in (QueueClosedError, getattr(errors, "ShutDown", None)) if cls is not None
)


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
    """What a pool has done so far."""

    done: int = 0
    failed: int = 0
    dead: int = 0


class WorkerPool:
    """``threads`` worker threads calling ``handler(item)`` for each item of ``queue``.

    ``run()`` works until :meth:`stop` (or SIGINT/SIGTERM when called from the main thread);
    ``run_until_empty()`` also returns once the queue is empty and no retry is pending.
    ``stop_timeout`` bounds how long a graceful stop waits for running handlers; items still
    held then go back to the queue when the process exits. Progress is logged through the
    ``ackqueue`` logger every ``log_interval`` seconds.
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
    ) -> None:
        if threads < 1:
            raise ValueError("a pool needs at least one thread")
        self.queue = queue
        self.handler = handler
        self.threads = threads
        self.retry = retry or Retry()
        self.stop_timeout = stop_timeout
        self.log_interval = log_interval
        self.poll = poll
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._busy = 0
        self._retry_due = 0.0
        self._consumers: list[Consumer] = []
        self._workers: list[threading.Thread] = []
        self._interrupts = 0

    # -- running -------------------------------------------------------------------------------

    def run(self) -> PoolStats:
        """Work until stopped or the queue is shut down and drained; returns the counts.

        Handles SIGINT/SIGTERM when called from the main thread.
        """
        return self._run(until_empty=False)

    def run_until_empty(self) -> PoolStats:
        """Work until the queue is empty, nothing is held and no retry of ours is pending."""
        return self._run(until_empty=True)

    def stop(self) -> None:
        """Ask the pool to stop: no new items are taken; running handlers finish."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _run(self, until_empty: bool) -> PoolStats:
        self._stopping.clear()
        self._interrupts = 0
        restore = self._install_signal_handlers()
        started = time.monotonic()
        try:
            self._start_workers()
            self._supervise(until_empty, started)
            self._join_workers()
        except KeyboardInterrupt:
            # The second Ctrl-C: give back what is held now. Handlers still running cannot
            # ack afterwards (their items were given back), so nothing is lost or doubled
            # beyond an item whose handler finished but whose ack had not committed.
            self._stopping.set()
            self._release_all()
            log.warning("stopped at once; held items went back to the queue")
            raise
        finally:
            restore()
        self._log_progress(started, final=True)
        return self.stats

    def _start_workers(self) -> None:
        ready = threading.Barrier(self.threads + 1)
        self._workers = [
            threading.Thread(target=self._work, args=(ready,), name=f"ackqueue-worker-{n}",
                             daemon=True)
            for n in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()
        ready.wait()

    def _supervise(self, until_empty: bool, started: float) -> None:
        last_log = time.monotonic()
        while not self._stopping.wait(self.poll):
            if not any(w.is_alive() for w in self._workers):
                break
            if until_empty and self._is_drained():
                self._stopping.set()
                break
            if time.monotonic() - last_log >= self.log_interval:
                self._log_progress(started)
                last_log = time.monotonic()

    def _join_workers(self) -> None:
        busy = self._busy
        if busy:
            log.info("stopping: waiting up to %.0f s for %d running handler(s)",
                     self.stop_timeout, busy)
        deadline = time.monotonic() + self.stop_timeout
        for worker in self._workers:
            # Short waits so that a second Ctrl-C is seen at once.
            while worker.is_alive() and time.monotonic() < deadline:
                worker.join(0.1)
        late = [w.name for w in self._workers if w.is_alive()]
        if late:
            log.warning("%d handler(s) still running after %.0f s; their items go back to the "
                        "queue", len(late), self.stop_timeout)
            self._release_all()

    def _is_drained(self) -> bool:
        with self._lock:
            if self._busy or time.time() < self._retry_due:
                return False
        return bool(self.queue.qsize() == 0 and self.queue.unacked_count() == 0)

    def _release_all(self) -> None:
        with self._lock:
            consumers = list(self._consumers)
        for consumer in consumers:
            consumer.close()

    # -- one worker ------------------------------------------------------------------------------

    def _work(self, ready: threading.Barrier) -> None:
        consumer = self.queue.connect()
        with self._lock:
            self._consumers.append(consumer)
        ready.wait()
        with consumer:
            while not self._stopping.is_set():
                try:
                    item = consumer.get(timeout=self.poll)
                except Empty:
                    continue
                except _ENDED:
                    return
                with self._lock:
                    self._busy += 1
                try:
                    self._handle(consumer, item)
                except NotHeldError:
                    pass  # given back (forced stop, lease ran out) while the handler ran
                except QueueClosedError:
                    return
                except Exception:  # an ack or nack failed: the item stays held or goes back
                    log.exception("settling item %r failed", item)
                finally:
                    with self._lock:
                        self._busy -= 1

    def _handle(self, consumer: Consumer, item: Any) -> None:
        attempts = consumer.delivery(item).attempts
        try:
            self.handler(item)
        except Exception as exc:
            self._failed(consumer, item, attempts, exc)
            return
        consumer.ack(item)
        with self._lock:
            self.stats.done += 1

    def _failed(self, consumer: Consumer, item: Any, attempts: int, exc: Exception) -> None:
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
        self._stopping.set()

    def _log_progress(self, started: float, final: bool = False) -> None:
        elapsed = max(1e-9, time.monotonic() - started)
        with self._lock:
            done, failed, dead = self.stats.done, self.stats.failed, self.stats.dead
        log.info(
            "%s%d done (%.1f/s), %d failed, %d dead; queue: %d ready, %d held",
            "finished: " if final else "", done, done / elapsed, failed, dead,
            self.queue.qsize(), self.queue.unacked_count(),
        )
