"""The durable queues: :class:`AckQueue`, :class:`LifoAckQueue` and :class:`PriorityAckQueue`.

They plug into ``queue.Queue``'s hooks (``_init``, ``_qsize``, ``_put``, ``_get``), so blocking,
timeouts, ``maxsize`` and ``task_done``/``join`` are the standard library's own code. What the
hooks add is storage: ``_put`` stages an item and ``put`` returns once it is committed; ``_get``
claims the first ready item and ``get`` returns once its removal is committed.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import ZODB
from ZODB.POSException import ReadConflictError

from .consumer import Consumer
from .errors import (
    AckQueueError,
    Empty,
    ItemLoadError,
    NotAQueueFileError,
    QueueClosedError,
    UnpicklableItemError,
)
from .holds import Delivery, Hold, HoldTable
from .interrupts import Shield
from .ready import ReadyIndex
from .records import ROOT_KEY, Entry, QueueRecord, queues_of
from .recovery import ThreadExitWatch
from .storage import Store

SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
PRIORITY_LIMIT = 1 << (62 - SEQ_BITS)
READ_RETRIES = 10


class _Retry(Exception):
    """Every staged put that ``_get`` waited for failed: wait again for a real item."""


@dataclass
class _Staged:
    key: Any
    seq: int
    data: bytes


@dataclass
class _Claim:
    key: Any
    item: Any
    attempts: int


class AckQueue(queue.Queue):
    """A FIFO ``queue.Queue`` whose items live in a ZODB FileStorage and survive crashes.

    ``path`` is the storage file (created if missing); ``None`` keeps the queue in memory.
    ``db`` is an open ``ZODB.DB`` to use instead; ``name`` tells apart several queues of
    one database. ``put`` returns once the item is durable; plain ``get`` removes it for
    good. For acknowledgements, each thread calls :meth:`connect` and uses the consumer.
    """

    _kind = "fifo"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        maxsize: int = 0,
        *,
        name: str = "default",
        db: ZODB.DB | None = None,
    ) -> None:
        self.name = name
        self._closed = False
        self._store = Store.acquire(path, db)
        try:
            self._store.claim_name(name)
        except BaseException:
            self._store.release()
            raise
        try:
            self._wrec: QueueRecord = self._store.run(self._find_or_create_record)
            self._reader, self._reader_tm = self._store.open_reader()
        except BaseException:
            self._store.release(name)
            raise
        self._reader_rec: QueueRecord = self._reader.root()[ROOT_KEY][name]
        self._reader_synced = self._store.commits
        self._session_seq = self._next_seq = self._reader_rec.seq_reserved
        super().__init__(maxsize)
        self.unfinished_tasks = len(self._ready)
        self._landed = threading.Condition(self.mutex)
        self._tls = threading.local()
        self._tables: set[HoldTable] = set()
        self._held = 0
        self._unloadable: set[Any] = set()
        self._delivery_ids = itertools.count(1)
        self._thread_watch = ThreadExitWatch(self._release_table)

    # -- the standard library's hooks ------------------------------------------------------

    def _init(self, maxsize: int) -> None:
        self._staged = 0
        self._ready = ReadyIndex(
            backlog=self._reader_rec.length(),
            scan_after=self._scan_after,
            is_from_backlog=lambda key: self._key_seq(key) < self._session_seq,
        )

    def _qsize(self) -> int:
        if self._closed:
            return 1  # wake blocked getters so that _get can raise QueueClosedError
        return len(self._ready) + self._staged

    def _put(self, item: Any) -> None:
        self._shield_close()
        self._check_open()
        priority = getattr(self._tls, "priority", 0)
        data = _pickle(item)
        seq = self._next_seq
        if seq > SEQ_MASK:
            raise AckQueueError(f"queue {self.name!r} has used up its sequence numbers")
        key = self._make_key(seq, priority, item)
        self._next_seq += 1
        self._tls.staged = _Staged(key, seq, data)
        self._staged += 1

    def _get(self) -> Any:
        while not len(self._ready):
            self._check_open()
            if not self._staged:
                raise _Retry
            self._landed.wait()
        self._check_open()
        self._shield_close()
        key = self._ready.pop()
        try:
            data, attempts = self._load(key)
            item = _unpickle(data, f"item {key!r} of queue {self.name!r}")
        except ItemLoadError:
            self._unloadable.add(key)
            raise
        except BaseException:
            self._ready.push(key)
            raise
        self._tls.claim = _Claim(key, item, attempts)
        return item

    # -- public API --------------------------------------------------------------------------

    def put(
        self, item: Any, block: bool = True, timeout: float | None = None, *, priority: int = 0
    ) -> None:
        """Put ``item``; return once it is durable. Lower ``priority`` is delivered first."""
        self._check_priority(priority)
        self._tls.priority = priority
        self._tls.staged = None
        with self._shielded():
            try:
                super().put(item, block, timeout)
            except BaseException:
                self._unstage(counted=False)
                raise
            staged = self._tls.staged
            self._tls.staged = None
            if staged is None:
                return  # a subclass's _put chose not to store it
            try:
                self._store.run(self._inserter(staged))
            except BaseException:
                self._tls.staged = staged  # _unstage takes it from there
                self._unstage(counted=True)
                raise
            with self.mutex:
                self._staged -= 1
                self._ready.push(staged.key)
                self._landed.notify_all()
                self.not_empty.notify()

    def put_nowait(self, item: Any, *, priority: int = 0) -> None:
        self.put(item, block=False, priority=priority)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Remove and return the next item; the removal is durable when this returns."""
        with self._shielded():
            claim = self._claim_next(block, timeout)
            try:
                self._store.run(self._deleter(claim.key))
            except BaseException:
                self._unclaim(claim.key)
                raise
            return claim.item

    def connect(self) -> Consumer:
        """A consumer for the calling thread: what it gets is held until acked."""
        with self.mutex:
            self._check_open()
            table = HoldTable()
            self._tables.add(table)
        self._thread_watch.watch(table)
        return Consumer(self, table)

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
        with self.mutex:
            if self._closed:
                return
            for table in list(self._tables):
                self._release_locked(table)
            self._closed = True
            self.not_empty.notify_all()
            self.not_full.notify_all()
            self._landed.notify_all()
        self._reader_tm.abort()
        self._reader.close()
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

    # -- what consumers call ---------------------------------------------------------------

    def _hold_next(self, table: HoldTable, block: bool, timeout: float | None) -> Any:
        with self._shielded():
            claim = self._claim_next(block, timeout)
            with self.mutex:
                if table.closed:
                    self._unclaim_locked(claim.key)
                    raise QueueClosedError("this consumer is closed")
                delivery = Delivery(
                    next(self._delivery_ids), claim.item, claim.attempts, time.time()
                )
                table.add(claim.key, delivery)
                self._held += 1
            return claim.item

    def _settle(self, table: HoldTable, hold: Hold, ack: bool) -> None:
        """Ack (remove for good) or nack (make ready again) a hold being settled."""
        if ack:
            try:
                self._store.run(self._deleter(hold.key))
            except BaseException:
                with self.mutex:
                    hold.settling = False
                    if table.closed:
                        self._release_locked(table)
                raise
        with self.mutex:
            table.remove(hold)
            self._held -= 1
            if table.closed and not table.by_id:
                self._tables.discard(table)
            if not ack:
                self._ready.push(hold.key)
                self.not_empty.notify()
        if ack:
            self.task_done()

    def _release_table(self, table: HoldTable) -> None:
        with self.mutex:
            self._release_locked(table)

    def _release_locked(self, table: HoldTable) -> None:
        table.closed = True
        returned = table.take_all_unsettled()
        for hold in returned:
            self._ready.push(hold.key)
        self._held -= len(returned)
        if not table.by_id:
            self._tables.discard(table)
        if returned:
            self.not_empty.notify(len(returned))

    # -- internals ---------------------------------------------------------------------------

    def _claim_next(self, block: bool, timeout: float | None) -> _Claim:
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            self._tls.claim = None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = queue.Queue.get(self, block, remaining)
            except _Retry:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    raise Empty from None
                continue
            except BaseException:
                claim = self._tls.claim
                if claim is not None:
                    self._unclaim(claim.key)
                raise
            claim = self._tls.claim
            self._tls.claim = None
            if claim is None:
                raise AckQueueError("a subclass's _get did not call AckQueue._get")
            claim.item = item
            return claim

    def _unclaim(self, key: Any) -> None:
        with self.mutex:
            self._unclaim_locked(key)

    def _unclaim_locked(self, key: Any) -> None:
        self._ready.push(key)
        self.not_empty.notify()

    def _unstage(self, counted: bool) -> None:
        staged = self._tls.staged
        self._tls.staged = None
        if staged is None:
            return
        with self.mutex:
            self._staged -= 1
            if counted:
                self.unfinished_tasks -= 1
            self._landed.notify_all()
            self.not_full.notify()

    @contextlib.contextmanager
    def _shielded(self) -> Iterator[None]:
        """Hold Ctrl-C back from the moment this thread takes something (see interrupts.py)."""
        with Shield() as shield:
            outer = getattr(self._tls, "shield", None)
            self._tls.shield = shield
            try:
                yield
            finally:
                self._tls.shield = outer

    def _shield_close(self) -> None:
        shield = getattr(self._tls, "shield", None)
        if shield is not None:
            shield.close()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def _check_priority(self, priority: int) -> None:
        if not -PRIORITY_LIMIT <= priority < PRIORITY_LIMIT:
            raise ValueError(f"priority must be in [{-PRIORITY_LIMIT}, {PRIORITY_LIMIT})")

    def _sync_reader(self, force: bool = False) -> None:
        commits = self._store.commits
        if force or commits != self._reader_synced:
            self._reader_tm.begin()
            self._reader_synced = commits

    def _load(self, key: Any) -> tuple[bytes, int]:
        self._sync_reader()
        for _ in range(READ_RETRIES):
            try:
                entry: Entry = self._reader_rec.entries[key]
                return entry.data, entry.attempts + 1
            except ReadConflictError:
                self._sync_reader(force=True)  # a pack dropped what our snapshot saw
        entry = self._reader_rec.entries[key]
        return entry.data, entry.attempts + 1

    def _scan_after(self, cursor: Any) -> Iterator[Any]:
        # A pack removes old revisions that the reader's snapshot may still be reading:
        # move the reader to the present and go on from the last key seen.
        self._sync_reader()
        for _ in range(READ_RETRIES):
            entries = self._reader_rec.entries
            keys = entries.keys() if cursor is None else entries.keys(min=cursor, excludemin=True)
            try:
                for key in keys:
                    cursor = key
                    yield key
                return
            except ReadConflictError:
                self._sync_reader(force=True)
        yield from self._reader_rec.entries.keys(min=cursor, excludemin=cursor is not None)

    def _find_or_create_record(self) -> QueueRecord:
        root = self._store.root()
        queues = queues_of(root, create=False)
        if queues is None and self._store.owns_db and len(root):
            raise NotAQueueFileError(
                f"{self._store.where} holds a ZODB database that is not an ackqueue file "
                f"(its root has {sorted(root)[:5]!r})"
            )
        queues = queues_of(root, create=True)
        record = queues.get(self.name)
        if record is None:
            record = queues[self.name] = QueueRecord(self._kind)
        elif record.kind != self._kind:
            raise NotAQueueFileError(
                f"queue {self.name!r} in {self._store.where} was made by a {record.kind} queue "
                f"class, not {type(self).__name__}"
            )
        return record

    def _inserter(self, staged: _Staged) -> Callable[[], None]:
        record = self._wrec

        def insert() -> None:
            record.entries[staged.key] = Entry(staged.data, time.time())
            record.length.change(1)
            record.reserve_seq(staged.seq)

        return insert

    def _deleter(self, key: Any) -> Callable[[], None]:
        record = self._wrec

        def delete() -> None:
            del record.entries[key]
            record.length.change(-1)

        return delete

    # -- ordering: the only thing the variants change ---------------------------------------

    def _make_key(self, seq: int, priority: int, item: Any) -> Any:
        """The stored key of a new entry: its place in the delivery order."""
        return (priority << SEQ_BITS) | seq

    def _key_seq(self, key: Any) -> int:
        return key & SEQ_MASK


class LifoAckQueue(AckQueue):
    """Like ``queue.LifoQueue``: the most recently put item is delivered first."""

    _kind = "lifo"

    def _make_key(self, seq: int, priority: int, item: Any) -> Any:
        return (priority << SEQ_BITS) | (SEQ_MASK - seq)

    def _key_seq(self, key: Any) -> int:
        return SEQ_MASK - (key & SEQ_MASK)


class PriorityAckQueue(AckQueue):
    """Like ``queue.PriorityQueue``: the smallest item first (equal items in put order).

    Items must be mutually comparable, as for ``queue.PriorityQueue``; the usual form is a
    ``(priority, data)`` tuple.
    """

    _kind = "priority"

    def _make_key(self, seq: int, priority: int, item: Any) -> Any:
        if priority:
            raise ValueError("PriorityAckQueue orders by the items themselves; omit priority=")
        key = (item, seq)
        if len(self._ready):
            key < self._ready.peek()  # noqa: B015 - raise TypeError now, before anything is stored
        return key

    def _key_seq(self, key: Any) -> int:
        return key[1]


def _pickle(item: Any) -> bytes:
    try:
        return pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise UnpicklableItemError(
            f"cannot store an item of type {type(item).__qualname__}: it cannot be pickled ({exc})"
        ) from exc


def _unpickle(data: bytes, what: str) -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:
        culprit = _failing_class(data)
        named = f" (class {culprit})" if culprit else ""
        raise ItemLoadError(f"cannot load {what}{named}: {exc}") from exc


class _ClassRecorder(pickle.Unpickler):
    last: str = ""

    def find_class(self, module: str, name: str) -> Any:
        self.last = f"{module}.{name}"
        return super().find_class(module, name)


def _failing_class(data: bytes) -> str:
    """The class an unloadable pickle names last before it fails: the one that is gone."""
    recorder = _ClassRecorder(io.BytesIO(data))
    try:
        recorder.load()
    except Exception:
        return recorder.last
    return ""
