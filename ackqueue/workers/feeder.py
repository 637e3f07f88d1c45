"""A worker pool's feeder: the thread that owns a consumer, gets items for the workers and
settles what they hand back.

A consumer belongs to the thread that connected it, so every get, ack and nack of a pool goes
through one of its feeders. A feeder prefetches items in batches (``get_many``) into the
pool's buffer, and settles the results handed back to it: every success since its last commit
in one ``ack_many`` (one commit, one fsync), failures by ``nack`` with a backoff delay, or to
the dead letters once an item has been delivered ``max_attempts`` times. A job counts as done
only once its ack is durable. Items no handler ran go back in their place without spending an
attempt (a snooze of no time), so that a stop never buries what was only prefetched.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

from ackqueue.errors import (
    Empty,
    ItemLoadError,
    NotHeldError,
    QueueClosedError,
    ShutDown,
    StorageUnreachableError,
)
from ackqueue.queue.consumer import Consumer
from ackqueue.workers.board import UNSTARTED, Board, give_back_unstarted, report_unloadable
from ackqueue.workers.retry import Retry, attempt_limit, failure_reason

log = logging.getLogger("ackqueue")

# A queue that was shut down (``q.shutdown()``) and has nothing left ends the feeder's loop.
ENDED: tuple[type[BaseException], ...] = (QueueClosedError, ShutDown)

# Seconds a feeder may wait for more results before a commit of only a few acks.
LINGER = 0.002
# Items a get takes at a time while most workers are inside a handler that blocks (I/O):
# a get holds the GIL throughout, and a handler whose sleep or read has ended waits for it.
# With a 1 ms handler and 8 threads, gets of 8 instead of 128 took the pool from 63-75 % to
# 75-89 % of what threads that only sleep reach (same runs); with a handler that does not
# block they cost a quarter of the throughput, so they are used only in the first case.
SHORT_GETS = 8


class Feeder:
    """One feeder thread with its consumer, and the results workers hand back to it."""

    def __init__(self, index: int, board: Board, retry: Retry, poll: float) -> None:
        self.index = index
        self.board = board
        self.retry = retry
        self.poll = poll
        self.linger = LINGER
        self.consumer: Consumer[Any] | None = None
        self.results: collections.deque[tuple[Any, object]] = collections.deque()
        self.unreachable = False  # the last get or ack failed for want of the server
        self.wake = threading.Event()  # results are waiting, or the pool is stopping
        self.thread: threading.Thread | None = None

    # -- the interface the pool and its workers use --------------------------------------------

    def start(self, until_empty: bool) -> None:
        """Start the thread; returns once it has connected (or failed to)."""
        connected = threading.Event()
        self.thread = threading.Thread(
            target=self._feed, args=(connected, until_empty),
            name=f"ackqueue-pool-feeder-{self.index}", daemon=True,
        )
        self.thread.start()
        connected.wait()

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def hand_back(self, item: Any, outcome: object) -> None:
        """A worker's result for ``item``: None (success), an exception, UNSTARTED or
        ABANDONED (see ackqueue.workers.board)."""
        self.results.append((item, outcome))
        if not self.wake.is_set():
            self.wake.set()

    def release(self) -> None:
        """Give back everything this feeder holds now (from any thread)."""
        if self.consumer is not None:
            self.consumer.close()

    # -- the thread ----------------------------------------------------------------------------

    def _feed(self, connected: threading.Event, until_empty: bool) -> None:
        try:
            consumer = self.consumer = self.board.queue.connect()
        finally:
            connected.set()
        try:
            with consumer:
                self._loop(consumer, until_empty)
        except ENDED:
            pass  # the queue was closed under us: what we held went back with it
        except Exception:
            log.exception("the pool's feeder failed; stopping the pool")
            self.board.stop("error")
        finally:
            # A queue closed under the pool ended the run, not a drained queue (the first
            # reason given stands: a drained run that closed its queue after says None).
            self.board.stop("closed" if self.board.queue.closed else self.board.stopped_by)

    def _loop(self, consumer: Consumer[Any], until_empty: bool) -> None:
        board, wake = self.board, self.wake
        ended = False  # the queue was shut down and has nothing left for us
        while True:
            wake.clear()
            self._settle(consumer)
            if consumer.closed:
                return
            if board.stopping.is_set():
                board.give_back_buffer()
                if board.workers_left == 0 and not self.results and not board.buffer:
                    self._settle(consumer)  # what the last giving back sent us
                    return
                wake.wait(self.poll)
                continue
            idle = not board.in_flight()
            if idle and ended and board.at_rest():
                # Shut down, and nothing of the pool's in flight, being got or settled: ended
                # once a last get finds nothing (an item given back unstarted is ready again).
                try:
                    if self._refill(consumer, block=False):
                        continue
                except ENDED:
                    pass
                board.stop(None)
                continue
            if idle and until_empty and board.is_drained():
                board.stop(None)
                continue
            if not ended:
                try:
                    added = self._refill(consumer, block=False)
                    self.unreachable = False
                    if added or not idle:
                        wake.wait(0 if self.results else self.poll)
                        continue
                    # Idle: one feeder waits for the queue itself (results cannot come
                    # meanwhile); two waiting in turn would never let is_drained() see
                    # no get under way.
                    if self.index == 0:
                        self._refill(consumer, block=True)
                        continue
                except ENDED:
                    ended = True
                    continue
                except StorageUnreachableError as exc:
                    # The server could not be reached (it restarted, or ended the commit of
                    # this process stopped past its transaction timeout): the next get waits
                    # for the connection. (A take that committed after all holds items in
                    # this session's name: they go back to the queue when it ends.)
                    self._unreachable("get", exc)
                    wake.wait(self.poll)
                    continue
            wake.wait(self.poll)

    def _refill(self, consumer: Consumer[Any], block: bool) -> bool:
        """Top the buffer up to ``prefetch``; whether anything was added.

        Only an idle pool blocks (up to ``poll``): otherwise results that come back
        meanwhile would wait for their ack.
        """
        board = self.board
        prefetch, running = board.prefetch, sum(board.running)
        room = prefetch - len(board.buffer) - running
        if room < 1 or (board.buffer and room < prefetch // 2):
            return False
        # Each feeder takes its share, so that the other finds some left to take.
        want = max(1, room // len(board.feeders))
        step = SHORT_GETS if 2 * running > len(board.running) else want
        got = 0
        while got < want:
            board.enter()
            try:
                items = consumer.get_many(min(step, want - got), timeout=self.poll,
                                          block=block and not got)
                now = time.monotonic()
                # In the buffer before the get counts as over: a feeder asking whether the
                # pool is at rest (Board.at_rest) must not find the items in neither place.
                board.buffer.extend([(item, now, self) for item in items])
            except Empty:
                break
            except ItemLoadError as exc:
                # Not the feeder's failure: the queue buried the item and took nothing, and
                # the next get moves past it (each such error buries one: this ends).
                report_unloadable(exc)
                continue
            finally:
                board.leave()
            got += len(items)
            board.wake_one()
            if got < want:
                time.sleep(0)  # let a handler back in between two gets (see SHORT_GETS)
        return got > 0

    def _settle(self, consumer: Consumer[Any]) -> None:
        """Settle what the workers handed back: all successes in one durable commit."""
        results, board = self.results, self.board
        if not results:
            return
        # A few results and a full buffer: wait a moment for more, so that a commit carries
        # many acks (each commit's CPU holds the GIL the workers need).
        quarter = board.prefetch // 4
        if len(results) < max(1, quarter) and len(board.buffer) > quarter:
            time.sleep(self.linger)
        # Counted busy before the results leave the deque: another feeder asking whether the
        # pool is drained must not miss a nack with a delay that is under way.
        board.enter()
        try:
            acks: list[Any] = []
            unstarted: list[Any] = []
            others: list[tuple[Any, object]] = []
            while results:
                item, outcome = results.popleft()
                if outcome is None:
                    acks.append(item)
                elif outcome is UNSTARTED:
                    unstarted.append(item)
                else:
                    others.append((item, outcome))
            if acks:
                self._ack(consumer, acks)
            if unstarted:
                self._give_back(consumer, unstarted)
            for item, outcome in others:
                self._settle_one(consumer, item, outcome)
        finally:
            board.leave()

    def _unreachable(self, what: str, exc: StorageUnreachableError) -> None:
        if not self.unreachable:  # once a streak
            log.warning("the pool's %s failed, trying again: %s", what, exc)
        self.unreachable = True

    def _ack(self, consumer: Consumer[Any], items: list[Any]) -> None:
        try:
            consumer.ack_many(items)
        except StorageUnreachableError as exc:
            if self.board.stopping.is_set():
                # Not tried again: they stay held, and go back to the queue when the
                # consumer closes (handled again: at least once).
                log.warning("the acks of %d item(s) failed while the pool stopped; they go "
                            "back to the queue: %s", len(items), exc)
                return
            # Tried again at the next settlement. If this commit did commit after all, the
            # items are found not held then (below): counted as not done, nothing lost.
            self.results.extendleft((item, None) for item in reversed(items))
            self._unreachable("ack", exc)
            return
        except NotHeldError:
            # Some were taken back (a lease ran out, a forced stop): ack the others one by one.
            done = 0
            for item in items:
                try:
                    consumer.ack(item)
                except NotHeldError:
                    continue
                done += 1
            self.board.count(done=done)
            return
        self.board.count(done=len(items))

    def _give_back(self, consumer: Consumer[Any], items: list[Any]) -> None:
        """Give back items no handler ran (see :func:`give_back_unstarted`)."""
        if not give_back_unstarted(consumer, items):
            for item in items:  # one at a time, each failure handled as its own
                self._settle_one(consumer, item, UNSTARTED)

    def _settle_one(self, consumer: Consumer[Any], item: Any, outcome: object) -> None:
        """Give back an unstarted or abandoned item, or retry or bury a failed one."""
        try:
            if isinstance(outcome, Exception):
                self._failed(consumer, item, outcome)
            elif outcome is UNSTARTED:
                consumer.snooze(item, 0)
            else:
                consumer.nack(item)  # its handler started: the delivery counts
        except NotHeldError:
            pass  # given back (forced stop, lease ran out) while the handler ran
        except StorageUnreachableError as exc:
            if self.board.stopping.is_set():
                log.warning("settling item %r failed while the pool stopped; it goes back to "
                            "the queue: %s", item, exc)
                return
            self.results.append((item, outcome))  # tried again at the next settlement
            self._unreachable("nack or burial", exc)
        except QueueClosedError:
            raise
        except Exception:
            # The nack or burial did not commit (a full disk, say): the item stays held, so a
            # pool that went on would never find the queue drained. Stop it as a failed ack
            # does: the item goes back to the queue when this feeder's consumer closes.
            log.error("settling item %r failed", item)
            raise

    def _failed(self, consumer: Consumer[Any], item: Any, exc: Exception) -> None:
        board = self.board
        attempts = consumer.delivery(item).attempts
        limit = attempt_limit(self.retry, board.queue.max_attempts)
        reason = failure_reason(exc)
        if limit and attempts >= limit:
            consumer.reject(item, reason=reason)
            board.count(failed=1)  # and dead: the burial raised the queue's count of them
            log.error("item %r failed %d time(s), sent to the dead letters: %s",
                      item, attempts, reason, exc_info=exc)
            return
        delay = self.retry.delay(attempts)
        consumer.nack(item, delay=delay)
        with board.lock:
            board.retry_due = max(board.retry_due, time.time() + delay)
            board.stats.failed += 1
        log.warning("item %r failed (attempt %d), retry in %.2f s: %s",
                    item, attempts, delay, reason)
