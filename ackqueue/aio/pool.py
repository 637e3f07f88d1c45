"""A pool of tasks running an async handler on each item: ack on success, retry with backoff,
stop on a signal; the asyncio twin of :class:`~ackqueue.workers.pool.WorkerPool`, with its
:class:`~ackqueue.workers.pool.Retry` and :class:`~ackqueue.workers.pool.PoolStats`.

The task that runs the pool owns its consumer and feeds a buffer with ``get_many`` (prefetch);
``concurrency`` worker tasks take from it and hand back what happened to each item; a settling
task commits every success since its last commit in one ``ack_many`` (one fsync, on a thread)
while the workers go on, and retries a failure by ``nack`` with the retry's delay, or sends it
to the dead letters once it has been delivered ``max_attempts`` times. A job counts as done
only once its ack is durable. Items no handler ran go back in their place without spending an
attempt, as in the thread pool (see :data:`ackqueue.workers.board.UNSTARTED`).

On SIGINT or SIGTERM (when run on the main thread's loop) the pool stops taking items, gives
back what is buffered and lets running handlers finish, for up to ``stop_timeout``; a second
SIGINT cancels them. Either way what the pool holds and has not acked goes back to the queue.

A :class:`Feeder` is a task that owns a consumer, fills the pool's buffer from it, and settles
on it what the workers hand back for its items. SIGINT and SIGTERM are the loop's own signal
handlers (``loop.add_signal_handler``), which run as callbacks between tasks, never inside one.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ackqueue.aio.consumer import AsyncConsumer
from ackqueue.aio.queues import AsyncAckQueue
from ackqueue.errors import (
    Empty,
    ItemLoadError,
    NotHeldError,
    QueueClosedError,
    ShutDown,
    StorageUnreachableError,
)
from ackqueue.workers.board import (
    ABANDONED,
    RETRY_SETTLE_SECONDS,
    UNSTARTED,
    buffered_fate,
    give_back_unstarted,
    report_unloadable,
)
from ackqueue.workers.options import check_pool_arguments, check_pool_options, default_prefetch
from ackqueue.workers.pool import PoolStats, Retry
from ackqueue.workers.retry import attempt_limit, failure_reason, warn_if_capped
from ackqueue.workers.stats import DeadLetterCount

log = logging.getLogger("ackqueue")

AsyncHandler = Callable[[Any], Awaitable[object]]

_STOP = object()  # tells a worker task to end
class AsyncWorkerPool:
    """``concurrency`` tasks awaiting ``handler(item)`` for each item of ``queue``.

    ``queue`` is an :class:`~ackqueue.AsyncAckQueue`; ``handler`` a coroutine function. When
    it returns the item is acked; when it raises the item is nacked with the delay ``retry``
    gives (a :class:`~ackqueue.Retry`), and dead-lettered after ``max_attempts``.
    ``stop_timeout`` bounds how long a graceful stop waits for running handlers, progress is
    logged every ``log_interval`` seconds, and idle tasks look again every ``poll`` seconds,
    as for :class:`~ackqueue.WorkerPool`.

    ``await run()`` works until :meth:`stop`, a signal, or the queue is shut down and drained;
    ``await run_until_empty()`` also returns once the queue is empty (items that their
    group's rules hold back count as waiting), nothing is held and no retry of its own is
    pending. A :meth:`stop` while no run is under way stops the next one, which returns at
    once. Both return the :class:`~ackqueue.PoolStats` of that run alone (each run counts
    from zero; ``stats`` shows the running or last run's). ``prefetch`` is
    how many items the pool holds ahead of its workers (default 32 a task; one a task when
    the queue has an ``ack_timeout``).
    """

    def __init__(
        self,
        queue: AsyncAckQueue[Any],
        handler: AsyncHandler,
        concurrency: int = 8,
        retry: Retry | None = None,
        *,
        stop_timeout: float = 30.0,
        log_interval: float = 10.0,
        poll: float = 0.2,
        prefetch: int | None = None,
    ) -> None:
        if not isinstance(queue, AsyncAckQueue):
            raise TypeError(f"queue must be an open AsyncAckQueue, not {queue!r}: "
                            "AsyncWorkerPool(AsyncAckQueue(path), handler)")
        if not callable(handler):
            raise TypeError(f"handler must be an async function taking one item, not {handler!r}")
        check_pool_arguments(handler, "concurrency", concurrency, "task", retry)
        check_pool_options(prefetch, stop_timeout, poll, log_interval)
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.retry = retry or Retry()
        warn_if_capped(self.retry, queue.max_attempts)
        self.stop_timeout = stop_timeout
        self.log_interval = log_interval
        self.poll = poll
        leased = queue.ack_timeout is not None
        self.prefetch = default_prefetch(prefetch, concurrency, leased)
        self.stats = PoolStats()  # the last run's (each run starts its own)
        self._dead = DeadLetterCount(queue.sync)
        self._stopping: asyncio.Event | None = None
        self._unreachable = False  # the last get or ack failed for want of the server
        self._stopped_by: str | None = None
        self._stop_asked = False  # stop() while no run was under way: the next one stops
        self._interrupts = 0
        self._feeders: list[Feeder] = []
        self._running = 0
        self._getting = 0  # items asked for by gets under way
        self._workers_done: asyncio.Event | None = None
        self._retry_due = 0.0
        self._workers_left = 0
        self._need_more: asyncio.Event | None = None  # the buffer fell below half
        self._forced: asyncio.Event | None = None  # a second SIGINT: stop at once

    async def run(self) -> PoolStats:
        """Work until stopped, or the queue is shut down and drained."""
        return await self._run(until_empty=False)

    async def run_until_empty(self) -> PoolStats:
        """Work until the queue is empty, nothing is held and no retry of ours is pending."""
        return await self._run(until_empty=True)

    def stop(self) -> None:
        """Ask the pool to stop: no new items are taken; running handlers finish. Called
        while no run is under way, it stops the next run, which returns at once."""
        if self._stopping is None:
            self._stop_asked = True
        self._stop("stop()")

    def _stop(self, by: str | None) -> None:
        if self._stopping is None:
            return
        if not self._stopping.is_set() and self._stopped_by is None:
            self._stopped_by = by
        self._stopping.set()
        if self._need_more is not None:
            self._need_more.set()

    # -- running -------------------------------------------------------------------------------

    async def _run(self, until_empty: bool) -> PoolStats:
        if self._stopping is not None:
            raise RuntimeError("this pool is running already")
        self._stopping = asyncio.Event()
        self._need_more = asyncio.Event()
        self._forced = asyncio.Event()
        self._workers_done = asyncio.Event()
        self._stopped_by = None
        self._interrupts = 0
        self.stats = PoolStats()
        self._dead = DeadLetterCount(self.queue.sync)
        if self._stop_asked:
            self._stop_asked = False
            self._stop("stop()")
        restore = handle_stop_signals(self._on_signal)
        started = time.monotonic()
        buffer: asyncio.Queue[Any] = asyncio.Queue()
        self._feeders = [Feeder() for _ in range(FEEDERS)]
        try:
            self._workers_left = self.concurrency
            workers = [
                asyncio.create_task(self._work(buffer), name=f"ackqueue-worker-{n}")
                for n in range(self.concurrency)
            ]
            feeding = [
                asyncio.create_task(self._feeder(feeder, buffer, until_empty))
                for feeder in self._feeders
            ]
            logger = asyncio.create_task(self._log_loop(started))
            try:
                await self._stopping.wait()
                await self._wind_down(buffer, workers)
            finally:
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                logger.cancel()
                self._workers_done.set()
                self._stop(self._stopped_by)
                failures = await asyncio.gather(*feeding, return_exceptions=True)
            for failure in failures:
                if isinstance(failure, BaseException):
                    raise failure
        finally:
            restore()
            self._stopping = None
        self._count_dead()
        self.stats.stopped_by = self._stopped_by
        self._log_progress(started, final=True)
        return self.stats

    async def _feeder(self, feeder: Feeder, buffer: asyncio.Queue[Any], until_empty: bool
                      ) -> None:
        """One feeder task: owns a consumer, fills the buffer, settles what comes back."""
        assert self._workers_done is not None
        # Backlog reads on a thread: the workers and settlers run on meanwhile.
        async with self.queue.connect(takes_on_threads=True) as consumer:
            feeder.consumer = consumer
            settlers = [
                asyncio.create_task(self._settle_loop(feeder, consumer)) for _ in range(SETTLERS)
            ]
            try:
                await self._feed(feeder, consumer, buffer, until_empty)
            except Exception:
                log.exception("the pool's feeder failed; stopping the pool")
                self._stop("error")
            finally:
                # A queue closed under the pool ended the run (see the thread pool's feeder).
                self._stop("closed" if self.queue.closed else self._stopped_by)
                await self._workers_done.wait()  # then nothing more comes back to settle
                feeder.closing = True
                feeder.ready.set()
                await asyncio.gather(*settlers)

    async def _feed(self, feeder: Feeder, consumer: AsyncConsumer[Any],
                    buffer: asyncio.Queue[Any], until_empty: bool) -> None:
        stopping = self._stopping
        need_more = self._need_more
        assert stopping is not None and need_more is not None
        while not stopping.is_set():
            room = self.prefetch - buffer.qsize() - self._running - self._getting
            if room < max(1, self.prefetch // 4) and buffer.qsize():
                # Full enough: wait for a worker's take to leave room (with the buffer below
                # half, its next take sets the event), or for the stop. Always wait: with the
                # room taken by the other feeder's get, which waits on the event loop for the
                # queue, looping back at once spun for ever and starved that get, the
                # workers and the stop signals alike.
                need_more.clear()
                await need_more.wait()
                continue
            if until_empty and self._is_drained(buffer):
                self._stop(None)
                break
            share = max(1, room // FEEDERS)  # leave some for the other feeder to take
            # Only the first feeder waits for the queue itself: two waiting in turn would
            # never let _is_drained() see no get under way.
            waits = feeder is self._feeders[0]
            self._getting += share
            shut = False
            try:
                items = await consumer.get_many(share, timeout=self.poll if waits else 0)
                self._unreachable = False
            except Empty:
                items = []
            except QueueClosedError:
                break  # closed under us: the feeder's end says so (see _feeder)
            except ItemLoadError as exc:
                # Buried by the queue, nothing taken: the next get moves past it (see the
                # thread pool's feeder).
                report_unloadable(exc)
                continue
            except ShutDown:
                # Shut down, with nothing ready now. What is buffered, running or being
                # settled is still ours (and what a worker gives back unstarted is ready
                # again): the run ends once none of it is left and a get still finds nothing.
                items, shut = [], True
            except StorageUnreachableError as exc:
                # The server could not be reached: the next get waits for the connection (as
                # the thread pool's feeder does; see ackqueue.workers.feeder).
                self._say_unreachable("get", exc)
                await asyncio.sleep(self.poll)
                continue
            finally:
                self._getting -= share
                self._count_dead()  # the queue buries at a get an item out of attempts
            if shut:
                if self._is_idle(buffer):
                    self._stop(None)  # shut down and drained
                    break
                await asyncio.sleep(self.poll)
                continue
            if not items and not waits:
                need_more.clear()
                await need_more.wait()  # items are coming in, or the pool is stopping
            if stopping.is_set():
                # Stopped while the get ran: the buffer was given back already, and no worker
                # takes from it any more (left there, they went back with the consumer's
                # close, counted as delivered).
                for item in items:
                    feeder.hand_back(item, UNSTARTED)
                break
            got_at = time.monotonic()
            for item in items:
                buffer.put_nowait((item, feeder, got_at))

    def _is_idle(self, buffer: asyncio.Queue[Any]) -> bool:
        """Nothing of the pool's buffered, running, coming back, being settled or being got.
        (A take under way has its item neither ready nor held: hence ``_getting``.)"""
        if buffer.qsize() or self._running or self._getting:
            return False
        return not any(f.results or f.settling for f in self._feeders)

    def _is_drained(self, buffer: asyncio.Queue[Any]) -> bool:
        """Nothing ready, held, buffered, running, coming back or being got; no retry due."""
        if not self._is_idle(buffer):
            return False
        if time.time() < self._retry_due:
            return False
        # As the thread pool's Board.is_drained: a retry that fell due is counted ready only
        # once the queue's timer has moved it, a moment after its time; and items their
        # group's rules hold back now, which qsize() leaves out, are still to come.
        if (self._retry_due and time.time() < self._retry_due + RETRY_SETTLE_SECONDS
                and self.queue.sync.delayed_count()):
            return False
        return self.queue.sync._ready_total() == 0 and self.queue.unacked_count() == 0

    async def _wind_down(self, buffer: asyncio.Queue[Any], workers: list[asyncio.Task[Any]]
                         ) -> None:
        """Give back what is buffered; let running handlers finish, up to ``stop_timeout``."""
        while not buffer.empty():
            item, feeder, _ = buffer.get_nowait()
            feeder.hand_back(item, UNSTARTED)
        for _ in workers:
            buffer.put_nowait(_STOP)
        if self._running:
            log.info("stopping: waiting up to %.0f s for %d running handler(s)",
                     self.stop_timeout, self._running)
        assert self._forced is not None
        forced = asyncio.create_task(self._forced.wait())
        finished = asyncio.ensure_future(asyncio.wait(workers))
        try:
            await asyncio.wait([finished, forced], timeout=self.stop_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            forced.cancel()
            finished.cancel()
        late = [w for w in workers if not w.done()]
        if late:
            log.warning("%d handler(s) still running after %.0f s; their items go back to "
                        "the queue", len(late), self.stop_timeout)

    def _refill_below(self) -> int:
        """A feeder with a full buffer waits until a worker's get leaves fewer items than
        this: half the prefetch, and at least 1 (with a prefetch of 1, half is 0, which no
        get goes below: the pool waited for ever)."""
        return max(1, self.prefetch // 2)

    # -- one worker ------------------------------------------------------------------------------

    async def _work(self, buffer: asyncio.Queue[Any]) -> None:
        handler = self.handler
        lease = self.queue.ack_timeout
        may_be_void = self.queue.sync._may_be_void
        try:
            while True:
                got = await buffer.get()
                if got is _STOP:
                    return
                item, feeder, got_at = got
                if buffer.qsize() < self._refill_below() and self._need_more is not None:
                    self._need_more.set()
                fate = buffered_fate(feeder.consumer, item, got_at, lease, may_be_void)
                if fate != "handle":
                    if fate == "give back":
                        feeder.hand_back(item, UNSTARTED)
                    continue
                self._running += 1
                try:
                    await handler(item)
                    outcome: object = None
                except Exception as exc:
                    outcome = exc
                except asyncio.CancelledError:
                    feeder.hand_back(item, ABANDONED)  # a forced stop: it goes back
                    raise
                except BaseException:
                    feeder.hand_back(item, ABANDONED)
                    log.exception("a worker task was ended by its handler on item %r; the "
                                  "item goes back to the queue", item)
                    return
                finally:
                    self._running -= 1
                feeder.hand_back(item, outcome)
        finally:
            self._workers_left -= 1
            if self._workers_left == 0 and self._stopping and not self._stopping.is_set():
                log.error("every worker task of the pool ended; stopping the pool")
                self._stop("error")

    # -- settling ------------------------------------------------------------------------------

    async def _settle_loop(self, feeder: Feeder, consumer: AsyncConsumer[Any]) -> None:
        while True:
            if not feeder.results:
                if feeder.closing:
                    return
                feeder.ready.clear()
                await feeder.ready.wait()
                continue
            await self._settle(feeder, consumer)

    async def _settle(self, feeder: Feeder, consumer: AsyncConsumer[Any]) -> None:
        results = feeder.results
        acks: list[Any] = []
        unstarted: list[Any] = []
        others: list[tuple[Any, object]] = []
        while results and len(acks) + len(unstarted) + len(others) < self.prefetch:
            item, outcome = results.popleft()
            if outcome is None:
                acks.append(item)
            elif outcome is UNSTARTED:
                unstarted.append(item)
            else:
                others.append((item, outcome))
        feeder.settling += 1
        try:
            if acks:
                await self._ack(feeder, consumer, acks)
            if unstarted:
                await self._give_back(feeder, consumer, unstarted)
            for item, outcome in others:
                await self._settle_one(feeder, consumer, item, outcome)
        finally:
            feeder.settling -= 1
            self._count_dead()

    def _say_unreachable(self, what: str, exc: StorageUnreachableError) -> None:
        if not self._unreachable:  # once a streak
            log.warning("the pool's %s failed, trying again: %s", what, exc)
        self._unreachable = True

    async def _ack(self, feeder: Feeder, consumer: AsyncConsumer[Any], items: list[Any]) -> None:
        try:
            await consumer.ack_many(items)
        except StorageUnreachableError as exc:
            assert self._stopping is not None
            if self._stopping.is_set():
                log.warning("the acks of %d item(s) failed while the pool stopped; they go "
                            "back to the queue: %s", len(items), exc)
                return
            # Tried again at the next settlement (see the thread pool's feeder).
            feeder.results.extendleft((item, None) for item in reversed(items))
            self._say_unreachable("ack", exc)
            await asyncio.sleep(self.poll)
            return
        except NotHeldError:
            done = 0  # some were taken back (a lease ran out): ack the others one by one
            for item in items:
                try:
                    await consumer.ack(item)
                except NotHeldError:
                    continue
                done += 1
            self.stats.done += done
            return
        self.stats.done += len(items)

    async def _give_back(self, feeder: Feeder, consumer: AsyncConsumer[Any], items: list[Any]
                         ) -> None:
        """Give back items no handler ran, as the thread pool does (see
        :func:`~ackqueue.workers.board.give_back_unstarted`): the whole commit on one of the
        queue's threads, with the consumer's sync self, as each of its awaited calls runs."""
        if not await consumer.run_with(give_back_unstarted, items):
            for item in items:  # one at a time, each failure handled as its own
                await self._settle_one(feeder, consumer, item, UNSTARTED)

    async def _settle_one(
        self, feeder: Feeder, consumer: AsyncConsumer[Any], item: Any, outcome: object
    ) -> None:
        try:
            if isinstance(outcome, Exception):
                await self._failed(consumer, item, outcome)
            elif outcome is UNSTARTED:
                await consumer.snooze(item, 0)
            else:
                await consumer.nack(item)  # its handler started: the delivery counts
        except NotHeldError:
            pass  # given back (a lease ran out) while the handler ran
        except StorageUnreachableError as exc:
            assert self._stopping is not None
            if self._stopping.is_set():
                log.warning("settling item %r failed while the pool stopped; it goes back to "
                            "the queue: %s", item, exc)
                return
            feeder.results.append((item, outcome))  # tried again at the next settlement
            self._say_unreachable("nack or burial", exc)
            await asyncio.sleep(self.poll)
        except QueueClosedError:
            raise
        except Exception:
            # The nack or burial did not commit (a full disk, say): the item stays held, so a
            # pool that went on would never find the queue drained (see the thread pool's
            # feeder). The item goes back to the queue when the consumer closes.
            log.exception("settling item %r failed; stopping the pool", item)
            self._stop("error")

    async def _failed(self, consumer: AsyncConsumer[Any], item: Any, exc: Exception) -> None:
        attempts = consumer.delivery(item).attempts
        limit = attempt_limit(self.retry, self.queue.max_attempts)
        reason = failure_reason(exc)
        if limit and attempts >= limit:
            await consumer.reject(item, reason=reason)
            self.stats.failed += 1  # and dead: the burial raised the queue's count of them
            log.error("item %r failed %d time(s), sent to the dead letters: %s",
                      item, attempts, reason, exc_info=exc)
            return
        delay = self.retry.delay(attempts)
        self._retry_due = max(self._retry_due, time.time() + delay)
        await consumer.nack(item, delay=delay)
        self.stats.failed += 1
        log.warning("item %r failed (attempt %d), retry in %.2f s: %s",
                    item, attempts, delay, reason)

    # -- signals and progress ------------------------------------------------------------------

    def _on_signal(self, signum: int) -> None:
        self._interrupts += 1
        name = signal.Signals(signum).name
        if self._interrupts > 1 and signum == signal.SIGINT:
            log.warning("SIGINT again: cancelling running handlers; their items go back")
            self._stop(name)
            if self._forced is not None:
                self._forced.set()
            return
        log.warning("%s: stopping after running handlers finish (Ctrl-C again to stop at once)",
                    name)
        self._stop(name)

    async def _log_loop(self, started: float) -> None:
        while True:
            await asyncio.sleep(self.log_interval)
            self._log_progress(started)

    def _count_dead(self) -> None:
        """Bring ``stats.dead`` up to date (see DeadLetterCount): after each get and
        settlement, so that the burials of both, the queue's at a get included, show."""
        self.stats.dead = self._dead()

    def _log_progress(self, started: float, final: bool = False) -> None:
        elapsed = max(1e-9, time.monotonic() - started)
        s = self.stats
        log.info("%s%d done (%.1f/s), %d failed, %d dead; queue: %d ready, %d held",
                 "finished: " if final else "", s.done, s.done / elapsed, s.failed, s.dead,
                 self.queue.sync._ready_total(), self.queue.unacked_count())


# Feeder tasks, each with its consumer: while one waits for its get_many (items read on a
# thread), the other's items are being handled.
FEEDERS = 2
# Tasks of a feeder that commit its acks: while one waits for its fsync, the other commits.
SETTLERS = 2


class Feeder:
    """One feeder's own state: what the workers hand back to it, to settle on its consumer."""

    def __init__(self) -> None:
        self.consumer: AsyncConsumer[Any] | None = None
        self.results: collections.deque[tuple[Any, object]] = collections.deque()
        self.ready = asyncio.Event()  # results are waiting, or the pool is closing
        self.settling = 0
        self.closing = False

    def hand_back(self, item: Any, outcome: object) -> None:
        self.results.append((item, outcome))
        self.ready.set()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def handle_stop_signals(on_signal: Callable[[int], None]) -> Callable[[], None]:
    """Call ``on_signal(signum)`` on SIGINT and SIGTERM while the running loop runs on the
    main thread (elsewhere signals are not ours); returns what puts back the handlers that
    were there before."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)

    def restore() -> None:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)

    return restore
