"""The durable queues: :class:`AckQueue`, :class:`LifoAckQueue` and :class:`PriorityAckQueue`.

They plug into ``queue.Queue``'s hooks (``_init``, ``_qsize``, ``_put``, ``_get``), so blocking,
timeouts, ``maxsize`` and ``task_done``/``join`` are the standard library's own code. What the
hooks add is storage: ``_put`` stages an item and ``put`` returns once it is committed; ``_get``
claims the first ready item and ``get`` returns once its removal is committed. The features
beyond ``queue.Queue`` live in mixins of their own modules (dead letters, leases, batches,
shutdown); transactions are in :mod:`ackqueue.transactions`, and the three kinds differ only
in how :mod:`ackqueue.ordering` keys their entries.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

import ZODB

from ackqueue.base.clock import Clock
from ackqueue.base.interrupts import Shield, checkpoint, hold_back
from ackqueue.base.timers import Timers
from ackqueue.delivery.batches import BatchMixin
from ackqueue.delivery.claiming import ClaimingMixin
from ackqueue.delivery.claims import Claim, GetAgain, Staged, unpickle_item
from ackqueue.delivery.deadletters import DeadLetterMixin
from ackqueue.delivery.delays import DelayMixin, Delays
from ackqueue.delivery.holds import Delivery, HoldTable
from ackqueue.delivery.leases import LeaseMixin
from ackqueue.delivery.ordering import FifoOrder, LifoOrder, PriorityOrder
from ackqueue.delivery.prefetch import ItemCache
from ackqueue.delivery.recovery import ThreadExitWatch
from ackqueue.delivery.seqs import SeqMixin
from ackqueue.delivery.settling import DeliveryMixin
from ackqueue.delivery.shutdown import ShutdownMixin, calling_stdlib
from ackqueue.errors import ItemLoadError, QueueClosedError
from ackqueue.queue import dropping, status
from ackqueue.queue.consumer import Consumer
from ackqueue.records import ROOT_KEY, QueueRecord
from ackqueue.shared.mode import SharedMixin, wants_shared
from ackqueue.storage.counts import stored_count
from ackqueue.storage.edits import StoredEditsMixin
from ackqueue.storage.reading import ReaderMixin
from ackqueue.storage.store import Store
from ackqueue.storage.transactions import Transaction, current, transaction


class AckQueue(
    FifoOrder,
    ClaimingMixin,
    SharedMixin,
    SeqMixin,
    DeliveryMixin,
    ReaderMixin,
    DelayMixin,
    DeadLetterMixin,
    LeaseMixin,
    BatchMixin,
    ShutdownMixin,
    StoredEditsMixin,
    queue.Queue,
):
    """A FIFO ``queue.Queue`` whose items live in a ZODB FileStorage and survive crashes.

    ``path`` is the storage file (created if missing); ``None`` keeps the queue in memory.
    ``db`` is an open ``ZODB.DB`` to use instead; ``name`` tells apart several queues of
    one database. ``put`` returns once the item is durable; plain ``get`` removes it for
    good. For acknowledgements, each thread calls :meth:`connect` and uses the consumer.

    ``max_attempts``: an item delivered that many times without an ack goes to the dead
    letters instead of being delivered again; each consumer get then records the delivery
    durably before handing the item out. ``ack_timeout``: seconds a consumer may hold an item
    before it goes back to the queue. ``clock``: a ``time.time``-like callable (for tests).
    ``path`` may be a URI (``zeo://host:port``, ``file://``, ``memory://``); on a storage
    processes share (or ``shared=True``), see :mod:`ackqueue.shared` and ``session_timeout``.

    ``durability="relaxed"`` makes ``put``/``ack`` return once the commit is handed to the
    operating system (it survives ``kill -9``) and fsyncs once a second, so a power loss may
    lose the last second; the default ``"strict"`` fsyncs every commit. ``autopack`` (on by
    default) packs the file in the background as it grows, so disk use stays bounded.
    """

    _kind = "fifo"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        maxsize: int = 0,
        *,
        name: str = "default",
        db: ZODB.DB | None = None,
        max_attempts: int | None = None,
        ack_timeout: float | None = None,
        clock: Clock | None = None,
        durability: str = "strict",
        autopack: bool = True,
        shared: bool | None = None,
        session_timeout: float = 10.0,
    ) -> None:
        if max_attempts is not None and (not isinstance(max_attempts, int) or max_attempts < 1):
            raise ValueError(f"max_attempts must be a positive int or None, not {max_attempts!r}")
        if ack_timeout is not None and not ack_timeout > 0:
            raise ValueError("ack_timeout must be a positive number of seconds or None")
        self.name = name
        self.max_attempts = max_attempts
        self.ack_timeout = ack_timeout
        self._clock: Clock = clock or time.time
        self._closed = False
        self._drained = False
        self._store = Store.acquire(
            path, db, durability=durability, autopack=autopack, shared=shared
        )
        try:
            claim = self._store.claim_name(name, self)
        except BaseException:
            self._store.release()
            raise
        try:
            # A shared queue's count is read by other processes: keep it in its Length.
            self._defer_count = not wants_shared(self._store.db, shared)
            self._wrec: QueueRecord = self._store.run(self._find_or_create_record)
            self._reader, self._reader_tm = self._store.open_reader()
            self._open_shared(shared, session_timeout)
        except BaseException:
            self._store.release(name)
            raise
        self._reader_rec: QueueRecord = self._reader.root()[ROOT_KEY][name]
        self._reader_synced = self._store.commits
        self._session_seq = self._next_seq = self._reader_rec.seq_reserved
        self._delays = Delays(self._reader_rec.delayed, self._clock(), self._key_id)
        self._items = ItemCache()
        super().__init__(maxsize)
        self.is_shutdown: bool = False
        self.unfinished_tasks: int
        self.unfinished_tasks = len(self._ready) + len(self._delays)
        self._landed = threading.Condition(self.mutex)
        self._tls = threading.local()
        self._tables: set[HoldTable] = set()
        self._held = 0
        self._tx_staged = 0
        self._session_attempts: dict[Any, int] = {}
        self._delivery_ids = itertools.count(1)
        self._thread_watch = ThreadExitWatch(self._release_table)
        self._timers = Timers(self.mutex, self._clock, name)
        with self.mutex:
            for key, when in self._delays.pending.values():
                self._timers.at(when, self._fall_due_callback(key))
        status.beacon.attach(self)  # lets `ackqueue stats` see holds from outside
        self._dropped = dropping.watch(self, claim)  # collected unclosed: release the file

    # -- the standard library's hooks ------------------------------------------------------

    def _init(self, maxsize: int) -> None:
        self._staged = 0
        stored = stored_count(self._reader_rec)
        self._ready = self._new_ready_index(stored - len(self._delays.at_open))
        for key in self._delays.due_at_open:
            self._ready.offer(key)

    def _qsize(self) -> int:
        checkpoint(self._wake_waits)  # queue.Queue asks before each of its waits: interrupts.py
        if self._closed or self.is_shutdown:
            # Let blocked callers through to _put/_get, which raise; public calls see the truth.
            op = getattr(self._tls, "op", None)
            if op == "put":
                return 0
            if op == "get":
                return max(1, len(self._ready))
        n = len(self._ready) + self._staged
        if not n and self._getter_closed_locked():
            return 1  # about to wait for a consumer closed meanwhile: on to _get, which raises
        return n

    def _wake_waits(self) -> None:
        """Wake every wait on this queue to check again (for a Ctrl-C on its way to one)."""
        with self.mutex:
            self.not_empty.notify_all()
            self.not_full.notify_all()
            self._landed.notify_all()

    def _put(self, item: Any) -> None:
        hold_back()  # staging takes a place in the queue: see interrupts.py
        self._check_can_put()
        self._tls.staged = self._stage(item, getattr(self._tls, "priority", 0))
        self._staged += 1

    def _get(self) -> Any:
        while not len(self._ready):
            self._check_getter_open()
            if self._drained:
                raise self._shut_down_error()
            if not self._staged:
                if self.is_shutdown:
                    raise self._shut_down_error()
                raise GetAgain
            # The queue only looked non-empty because of puts still committing: wait for them
            # to land, but no longer than the caller's own timeout (not at all for a nowait).
            deadline = getattr(self._tls, "deadline", None)
            checkpoint(self._wake_waits)
            if deadline is None:
                self._landed.wait()
            elif not self._landed.wait(deadline - time.monotonic()) and not len(self._ready):
                raise GetAgain
        self._check_getter_open()
        if self._drained:
            raise self._shut_down_error()
        hold_back()  # the claim takes an item: Ctrl-C waits until it is handed out or back
        key = self._ready.pop()
        try:
            data, attempts = self._load(key)
            item = unpickle_item(data, f"item {key!r} of queue {self.name!r}")
        except ItemLoadError as exc:
            self._tls.unloadable = (key, exc)
            raise
        except BaseException:
            self._ready.push(key)
            raise
        self._tls.claim = Claim(key, item, attempts)
        return item

    # -- public API --------------------------------------------------------------------------

    def put(
        self,
        item: Any,
        block: bool = True,
        timeout: float | None = None,
        *,
        priority: int = 0,
        delay: float | None = None,
        not_before: float | None = None,
    ) -> None:
        """Put ``item``; return once it is durable. Lower ``priority`` is delivered first.

        ``delay`` (seconds from now) or ``not_before`` (epoch seconds) hold the item back
        until then; it is stored at once but neither ready nor counted by ``qsize()`` before.
        """
        self._check_priority(priority)
        due = self._due_time(delay, not_before)
        with Shield():
            self._put_shielded(item, block, timeout, priority, due)

    def _put_shielded(
        self, item: Any, block: bool, timeout: float | None, priority: int, due: float
    ) -> None:
        tx = current(self._store)
        if tx is not None:
            self._put_in_transaction(tx, [item], block, timeout, priority, due)
            return
        self._tls.priority = priority
        self._tls.staged = None
        with calling_stdlib(self._tls, "put", undo=lambda: self._unstage(counted=False)):
            super().put(item, block, timeout)
        staged = self._tls.staged
        self._tls.staged = None
        if staged is None:
            return  # a subclass's _put chose not to store it
        staged.not_before = due
        try:
            self._store.run(self._inserter([staged]))
        except BaseException:
            self._unstage(counted=True, staged=staged)
            raise
        with self.mutex:
            self._staged -= 1
            self._land_locked(staged)
            self._landed.notify_all()

    def put_nowait(self, item: Any, **options: Any) -> None:
        self.put(item, block=False, **options)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return the next item; the removal is durable when this returns."""
        with Shield():
            if self._shared is not None:
                return self._shared_get(block, timeout)
            return self._get_shielded(block, timeout)

    def _get_shielded(self, block: bool, timeout: float | None) -> Any:
        claim = self._claim_next(block, timeout)
        key = claim.key
        tx = current(self._store)
        if tx is not None:
            tx.add(
                self._deleter([key]),
                check=self._require_stored([key]),
                after_commit=lambda: self._forget(key),
                undo=lambda: self._unclaim(key),
            )
            return claim.item
        try:
            self._store.run(self._deleter([key], check=True))
        except BaseException:
            self._unclaim(key)
            raise
        self._forget(key)
        return claim.item

    def connect(self) -> Consumer:
        """A consumer for the calling thread: what it gets is held until acked."""
        with self.mutex:
            self._check_open()
            table = HoldTable()
            self._tables.add(table)
        self._thread_watch.watch(table)
        return Consumer(self, table)

    def transaction(self) -> AbstractContextManager[Transaction]:
        """``with q.transaction():`` commits the block's queue operations together or not at all.

        It spans every queue of this queue's database, for the calling thread.
        """
        return transaction(self._store)

    def _current_transaction(self) -> Transaction | None:
        return current(self._store)

    def unacked_count(self) -> int:
        """How many items are held by consumers, delivered but not acked."""
        with self.mutex:
            return self._held

    def held(self) -> list[tuple[str, Delivery, float]]:
        """Every held item as ``(owner thread name, delivery, seconds held)``."""
        with self.mutex:
            return [(t.owner, d, age) for t in self._tables for d, age in t.ages()]

    def pack(self) -> None:
        """Drop old revisions from the storage file, keeping only the live state."""
        self._check_open()
        self._store.pack()

    def close(self) -> None:
        """Give back held items and close the queue (and the file, with its last queue)."""
        with Shield(interruptible=False):
            with self.mutex:
                if self._closed:
                    return
                for table in list(self._tables):
                    self._release_locked(table)
                self._closed = True
                self._dropped.detach()
                self._timers.stop()
                self.not_empty.notify_all()
                self.not_full.notify_all()
                self._landed.notify_all()
            self._close_shared()
            self._reader_tm.abort()
            self._reader.close()
            status.beacon.detach(self)
            self._store.release(self.name)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> AckQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._ready)} ready, {self._held} held"
        return f"<{type(self).__name__} {self.name!r} in {self._store.where}: {state}>"

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def _check_getter_open(self) -> None:
        """The queue, and the consumer this thread is getting for, are both still open."""
        self._check_open()
        if self._getter_closed_locked():
            if self.is_shutdown:  # closed by an immediate shutdown
                raise self._shut_down_error()
            raise QueueClosedError("this consumer was closed while its get was waiting")

    def _check_can_put(self) -> None:
        self._check_open()
        if self.is_shutdown:
            raise self._shut_down_error()

    def _land_locked(self, staged: Staged) -> None:
        if not staged.not_before:  # ready at once: keep its pickle for the get (prefetch.py)
            self._items.add(staged.seq, staged.data, 0)
        super()._land_locked(staged)


class LifoAckQueue(LifoOrder, AckQueue):
    """Like ``queue.LifoQueue``: the most recently put item is delivered first."""

    _kind = "lifo"


class PriorityAckQueue(PriorityOrder, AckQueue):
    """Like ``queue.PriorityQueue``: the smallest item first (equal items in put order).

    Items must be mutually comparable, as for ``queue.PriorityQueue``; the usual form is a
    ``(priority, data)`` tuple.
    """

    _kind = "priority"
