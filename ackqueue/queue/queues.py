"""The durable queues: :class:`AckQueue`, :class:`LifoAckQueue` and :class:`PriorityAckQueue`.

They plug into ``queue.Queue``'s hooks (``_init``, ``_qsize``, ``_put``, ``_get``), so blocking,
timeouts, ``maxsize`` and ``task_done``/``join`` are the standard library's own code, and
delegate the rest to collaborators that each own their state (docs/architecture.rst has the
list): the store and the queue's book in it, the supply (ready and delayed, in memory), the
holds, the mode (single-process or shared), and the operations across them: puts
(:mod:`.putting`), claims, deliveries, and puts by key (:mod:`.keying`). The three kinds
differ only in the :mod:`~ackqueue.delivery.ordering` they are given.

:class:`DeadLetters` is a queue's dead letters through its API: listing, counting,
requeueing and purging them (the stored side, burying and the dead-letter tree, is
:mod:`ackqueue.storage.deadletters`).

:class:`GroupControl` acts on one group of items at once: pause it for a while, resume it,
remove its items. A pause is stored (the queue opens with it again, and in shared mode every
process sees it); in one process the grouped ready index takes the group out of the rotation
until then. Removing a group removes its waiting items (ready or delayed) in one commit; items
of the group that consumers hold stay held: their ack, nack or snooze works as usual (call
again once they are settled, or pause the group first, to be rid of them).


What a front end that does not wait in threads (:mod:`ackqueue.aio`) needs of a queue: its
:class:`~ackqueue.delivery.conditions.ReadyListeners`, told whenever items become ready
(:func:`ready_listeners`), and whether a take commits anything (:func:`takes_commit_nothing`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, TypeVar

import ZODB

from ackqueue.base.clock import Clock
from ackqueue.base.interrupts import Shield
from ackqueue.delivery.conditions import Lifecycle, ReadyListeners, Tasks, notify_waiting
from ackqueue.delivery.groups import (
    GroupRules,
    check_named_group,
    checked_seconds,
    group_rules,
)
from ackqueue.delivery.holds import Delivery
from ackqueue.delivery.ordering import LifoOrdering, Ordering, PriorityOrdering
from ackqueue.queue import lifecycle, status
from ackqueue.queue.assembly import (
    Opened,
    Options,
    Parts,
    assemble,
    check_arguments,
    check_options,
    open_book,
    open_through_server_restarts,
    signals_of,
)
from ackqueue.queue.consumer import Consumer
from ackqueue.queue.core import Core
from ackqueue.queue.keying import Unique
from ackqueue.queue.metrics import QueueMetrics, measure_locked
from ackqueue.queue.putting import Puts
from ackqueue.storage.book import group_pauser, group_setter, group_settings
from ackqueue.storage.deadletters import DeadLetter
from ackqueue.storage.items import Serializer, codec_for
from ackqueue.storage.transactions import Transaction, transaction

T = TypeVar("T")
log = logging.getLogger("ackqueue")


class AckQueue(queue.Queue[T], Generic[T]):
    """A FIFO ``queue.Queue`` whose items live in a ZODB FileStorage and survive crashes.

    ``path`` is the storage file (created if missing; ``~`` is expanded, and a ``bytes`` or
    ``os.PathLike`` path is taken as ``open()`` takes it); ``None`` keeps the queue in memory;
    a URI (``zeo://host:port``, ``postgresql://...``, ``file://``, ``memory://``) opens that
    storage. ``db`` is an open ``ZODB.DB`` to use instead (close the queue before it: a
    queue whose database was closed raises :exc:`~ackqueue.StorageError`); ``name`` tells
    apart several queues of one database. ``maxsize`` bounds the queue as for
    ``queue.Queue`` (0: no bound).
    ``put`` returns once the item is durable; plain ``get`` removes it for good. For
    acknowledgements, each thread calls :meth:`connect` and uses the consumer.

    ``max_attempts``: an item delivered that many times without an ack goes to the dead
    letters instead of being delivered again; each consumer get then records the delivery
    durably before handing the item out. ``ack_timeout``: seconds a consumer may hold an item
    before it goes back to the queue. ``clock``: a ``time.time``-like callable (for tests,
    :class:`ManualClock`).

    ``shared``: ``True`` runs in shared mode, for several processes: with a file path, the
    file is served by a private ZEO server that the first process to open it starts and the
    others find, and every process must open it so; ``None`` (the default) chooses shared
    mode by itself on storages other processes write (ZEO, RelStorage). In shared mode holds
    are stored, and a process that misses its lease for ``session_timeout`` seconds is taken
    for dead: what it held goes back to the queue.

    ``durability="relaxed"`` makes ``put``/``ack`` return once the commit is handed to the
    operating system (it survives ``kill -9``) and fsyncs once a second, so a power loss may
    lose the last second; the default ``"strict"`` fsyncs every commit. ``autopack`` (on by
    default) packs the file as it grows, so disk use stays bounded (a file of up to 4 MB in
    line, by the put or ack whose commit made the pack due; a larger one in the background).

    For a crawler's frontier: ``max_held_per_group`` caps how many items of one ``group=``
    are out at once (held by any consumer); ``group_interval`` is the least time in seconds
    between two deliveries of one group; ``unique`` (``"forever"`` or a time to live in
    seconds) remembers the key of an item put with ``key=`` once it is done, so that a later
    put of that key is refused (the seen-set; :meth:`seen`, :meth:`forget`).

    ``serializer`` encodes the items: ``"pickle"`` (the default: any picklable object),
    ``"json"`` (what JSON carries; a tuple comes back a list), or an object with
    ``dumps(obj) -> bytes`` and ``loads(bytes) -> obj``. An item it cannot encode is an
    :exc:`UnpicklableItemError` (a ``TypeError``) at ``put``, nothing stored; stored bytes it
    cannot decode move to the dead letters, kept. The queue's record in the file keeps the
    serializer's name (for an object, its ``name`` attribute if it has a str one, else its
    qualified class name), and opening the queue with another one is a
    :exc:`SerializerMismatchError` naming both; each named queue of a database has its own. A
    stored pickle is code that runs when it is loaded; a JSON item is only data. While a queue
    with a serializer other than pickle is open on a database, its records may name only
    ackqueue's, BTrees' and persistent's own classes (:func:`restricted_class_factory`), so a
    ``"json"`` queue file from elsewhere opens and is consumed without running any of its code;
    with ``db=``, such a serializer needs a database opened with that class factory.
    """

    _ordering: ClassVar[type[Ordering]] = Ordering

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
        max_held_per_group: int | None = None, group_interval: float = 0.0,
        unique: Unique = None,
        serializer: str | Serializer = "pickle",
    ) -> None:
        check_arguments(path, maxsize, name, db, shared, autopack, clock)
        codec = codec_for(serializer)
        rules = check_options(
            max_attempts, ack_timeout, session_timeout, unique, max_held_per_group, group_interval
        )
        self.name = name
        self.max_attempts = max_attempts
        self.ack_timeout = ack_timeout
        order = self._ordering()
        self._order = order
        self._life = life = Lifecycle(name)
        self._tasks = Tasks()

        def open_once() -> tuple[Opened, Parts]:
            opened = open_book(
                self, path, db, name, order.kind, type(self).__name__, durability, autopack,
                shared, codec,
            )
            try:
                rules.own.update(group_settings(opened.book))  # before the ready index is made
                opts = Options(
                    name, maxsize, max_attempts, ack_timeout, clock or time.time,
                    session_timeout, opened.shared, rules, unique,
                )
                super(AckQueue, self).__init__(maxsize)  # the stdlib's mutex and conditions
                self._tasks.wake_on(self.all_tasks_done)
                signals = signals_of(
                    self.mutex, self.not_empty, self.not_full, self.all_tasks_done
                )
                parts = assemble(
                    signals, opened.book, order, life, self._tasks, opts, self._stdlib_get,
                    self._stdlib_put,
                )
            except BaseException:
                opened.store.release(name)
                raise
            return opened, parts

        opened, parts = open_through_server_restarts(open_once, path if db is None else db)
        self._store, self._book = store, book = opened.store, opened.book
        core = parts.core
        self._signals, self._mode, self._supply = core.signals, core.mode, core.supply
        self._meter, self._clock = core.meter, core.clock
        self._timers, self._holds = parts.timers, parts.holds
        self._claimer, self._puts, self._deliveries = parts.claimer, parts.puts, parts.deliveries
        self._keys, self._closing = parts.keys, parts.closing
        self._groups, self._dead = GroupControl(core, rules), DeadLetters(core, parts.puts)
        life.paused = book.paused()
        if life.paused:  # it would otherwise look empty, and its getters wait without a word
            log.warning("queue %r opened paused: nothing is handed out until q.resume() (or, "
                        "in a shell: ackqueue resume PATH); puts go on", name)
        status.beacon.attach(self)  # lets `ackqueue stats` see holds from outside
        self._dropped = lifecycle.watch(
            self, life, core.signals, store, name, opened.claim, book.close,
            self._mode.stored_holds.dropped(),
        )

    # -- the standard library's hooks and state ---------------------------------------------

    @property
    def unfinished_tasks(self) -> int:
        """Items put and not yet done (acked, or ``task_done`` after a plain get): ``join``
        waits for none to be left."""
        return self._tasks.unfinished

    @unfinished_tasks.setter
    def unfinished_tasks(self, n: int) -> None:
        self._tasks.unfinished = n

    def join(self) -> None:
        """Block until every item put has been acked (or, after a plain ``get``, marked
        ``task_done``), as ``queue.Queue.join`` does. :class:`~ackqueue.QueueClosedError` if
        the queue is closed (before the call or while it waits) with items not done: they stay
        in the file, and nothing here would ever finish them (the standard library's join
        waited for ever)."""
        join_unless(self, None)

    @property
    def is_shutdown(self) -> bool:
        """True once :meth:`shutdown` was called."""
        return self._life.shut_down

    @is_shutdown.setter
    def is_shutdown(self, value: bool) -> None:
        self._life.shut_down = value

    def _stdlib_get(self, block: bool, timeout: float | None) -> Any:
        if not block or timeout is None or timeout >= 0:
            with self.mutex:
                if self._qsize():
                    # What queue.Queue.get does when an item is there at once: the hook, then
                    # wake a put; without its Python-level calls around them (the condition's
                    # enter and exit, an empty notify).
                    item = self._get()
                    notify_waiting(self.not_full)
                    return item
        return queue.Queue.get(self, block, timeout)  # it waits (or raises Empty) as its own

    def _stdlib_put(self, item: Any, block: bool, timeout: float | None) -> None:
        if self.maxsize > 0:
            queue.Queue.put(self, item, block, timeout)
            return
        # Unbounded, queue.Queue.put neither waits nor looks at the size: it runs the hook,
        # counts the task and wakes a get. The same without its Python-level calls around
        # them (the condition's enter and exit, the count's property, an empty notify).
        with self.mutex:
            self._put(item)
            self._tasks.added_locked(1)
            notify_waiting(self.not_empty)

    def full(self) -> bool:
        """True when ``maxsize`` is reached, so that ``put_nowait`` would raise ``Full``:
        ``maxsize`` counts the ready items of every group (paused, at their cap or within
        their interval too, which ``qsize()`` leaves out) and puts not yet landed (inside a
        transaction too), but neither delayed nor held items."""
        with self.mutex:
            return 0 < self.maxsize <= self._claimer.places_taken()

    def empty(self) -> bool:
        """True when ``get_nowait`` would raise ``Empty``: nothing may be delivered now (see
        ``qsize()``), or the queue is paused (:meth:`pause`)."""
        with self.mutex:
            return self._life.paused or not self._qsize()

    def _init(self, maxsize: int) -> None:
        pass  # the supply is made once the standard library's mutex exists

    def _qsize(self) -> int:
        return self._claimer.size_seen()

    def _put(self, item: Any) -> None:
        self._puts.stage(item)

    def _get(self) -> Any:
        return self._claimer.claim_head()

    # -- public API --------------------------------------------------------------------------

    def put(  # type: ignore[override]  # a put by key says whether it stored the item
        self,
        item: T,
        block: bool = True,
        timeout: float | None = None,
        *,
        priority: int = 0,
        delay: float | None = None,
        not_before: float | None = None,
        group: str | None = None,
        key: str | bytes | None = None, unique: Unique = None, replace: bool = False,
    ) -> bool | None:
        """Put ``item``; return once it is durable. Lower ``priority`` is delivered first.

        ``delay`` (seconds from now) or ``not_before`` (epoch seconds) hold the item back
        until then; it is stored at once but neither ready nor counted by ``qsize()`` before.
        ``group`` (a str, e.g. a host name) files the item under a group: gets go round-robin
        across groups, within ``max_held_per_group`` and ``group_interval``.

        With ``key`` (a str or bytes, e.g. the URL): stored only if no live item has that key
        and the seen-set does not remember it; returns ``True`` if stored, ``False`` if not
        (``None`` without a key). ``unique`` overrides the queue's seen-set rule for this
        item; ``replace=True`` replaces the payload (and due time) of the waiting item with
        that key, keeping its place. A held item is never changed.
        """
        self._order.check_priority(priority)
        due = self._puts.due_time(delay, not_before)
        with Shield():
            return self._keys.put(item, key, block, timeout, priority, due, unique, replace, group)

    def put_nowait(self, item: T, **options: Any) -> None:
        """``put(item, block=False, **options)``: ``Full`` at once on a full queue."""
        self.put(item, block=False, **options)

    def put_many(
        self,
        items: Iterable[T],
        block: bool = True,
        timeout: float | None = None,
        *,
        priority: int = 0,
        delay: float | None = None,
        not_before: float | None = None,
        group: str | None = None,
        keys: Iterable[str | bytes] | None = None, unique: Unique = None, replace: bool = False,
    ) -> list[bool] | None:
        """Put every item in one commit; return once all are durable (or none is stored).

        With ``maxsize``, waits until the whole batch fits (a batch larger than ``maxsize``
        is a ``ValueError``); ``block`` and ``timeout`` are as for :meth:`put`. With ``keys``
        (one per item), returns which items were stored, as :meth:`put` with ``key``; one
        ``group`` for every item.
        """
        items = list(items)
        self._order.check_priority(priority)
        due = self._puts.due_time(delay, not_before)
        with Shield():
            return self._keys.put_batch(
                items, keys, block, timeout, priority, due, unique, replace, group
            )

    def remove(self, key: str | bytes) -> None:
        """Drop the waiting item put with ``key``: :class:`UnknownKeyError` if there is none,
        :class:`KeyHeldError` if a consumer holds it (its ack or nack decides)."""
        self._keys.remove(key)

    def remove_where(self, pred: Callable[[T], object]) -> int:
        """Drop every waiting item ``pred`` accepts (it must not use the queue); how many."""
        return self._keys.remove_where(pred)

    def forget(self, key: str | bytes) -> bool:
        """Let ``key`` be put again although it was seen; whether it was remembered."""
        return self._keys.forget(key)

    def seen(self, key: str | bytes) -> bool:
        """Whether ``key`` is remembered as done (put with ``unique=``, then acked)."""
        return self._keys.seen(key)

    def seen_count(self) -> int:
        """How many keys the seen-set remembers (see :meth:`seen`). It reads the whole
        seen-set from the file (no counter is kept, so that an ack writes no more): ask it
        for a report, not per item."""
        return self._keys.seen_count()

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Remove and return the next item; the removal is durable when this returns."""
        with Shield():
            item: T = self._deliveries.get_away(block, timeout)
            return item

    def connect(self, *, task: str | None = None) -> Consumer[T]:
        """A consumer for this thread (or asyncio ``task``, named in held()): held till acked."""
        return Consumer(self._deliveries, self._deliveries.new_table(task))

    def transaction(self) -> AbstractContextManager[Transaction]:
        """``with q.transaction():`` commits the block's queue operations together or not at all.

        It spans every queue of this queue's database, for the calling thread.
        """
        return transaction(self._store)

    @property
    def shared(self) -> bool:
        """True when other processes may use this queue too (its holds are stored)."""
        return self._mode.shared

    def _may_be_void(self, taken_at: float) -> bool:
        """Whether holds taken at ``taken_at`` (``time.monotonic()``) may have been taken back
        by another process meanwhile (StoredHolds.may_be_void); for buffers such as WorkerPool's."""
        return self._mode.stored_holds.may_be_void(taken_at)

    def _ready_total(self) -> int:
        """How many items are ready, also those their group's rules hold back now (paused, at
        their cap, within their interval), which ``qsize()`` leaves out; for pools, which
        are not done while a group still waits its turn."""
        with self.mutex:
            return self._supply.ready_total()

    def unacked_count(self) -> int:
        """How many items are held by consumers, delivered but not acked."""
        with self.mutex:
            return self._holds.count

    def held(self) -> list[tuple[str, Delivery, float]]:
        """Every held item as ``(owner: its consumer's thread or task name, delivery, age)``."""
        with self.mutex:
            return self._holds.listing_locked()

    def stored_count(self) -> int:
        """How many items the queue stores: ready, delayed and held, by every process (in
        shared mode ``unacked_count`` and ``qsize`` see this process only). A read, no commit:
        a crawler asks it before it calls a crawl finished while another process works."""
        self._life.check_open()
        return self._book.count()

    def delayed_count(self) -> int:
        """How many stored items are waiting for their delay to pass (not in ``qsize()``)."""
        with self.mutex:
            return len(self._supply.delays)

    def metrics(self) -> QueueMetrics:
        """Live figures: items by state, holds by owner, ages, rates, ack latency."""
        with self.mutex:
            self._life.check_open()
            return measure_locked(
                self.name, self._supply, self._holds, self._book, self._meter, self._clock,
                paused=self._life.paused,
            )

    def pause_group(self, group: str, seconds: float) -> None:
        """Deliver no item of ``group`` for ``seconds`` (0 resumes it); stored, all processes."""
        self._groups.pause(group, seconds)

    def remove_group(self, group: str) -> int:
        """Remove the waiting items of ``group`` (held ones stay held); return how many."""
        return self._groups.remove(group)

    def set_group(
        self, group: str, *, max_held: int | None = None, interval: float | None = None
    ) -> None:
        """Give ``group`` its own ``max_held`` (its ``max_held_per_group``) and ``interval``
        (its ``group_interval``) while the queue runs; None for either is the queue's option
        (so ``set_group(g)`` returns ``g`` to the queue's options). Stored, so it holds in every
        process and after a reopen; the next delivery of the group follows it (the interval
        is measured from the group's last delivery, also one it had run out after). A
        crawler turns a host's delay up when it answers slowly, say."""
        self._groups.set(group, max_held, interval)

    # -- dead letters --------------------------------------------------------------------------

    def dead_letters(self) -> list[DeadLetter]:
        """Every dead letter of this queue, oldest first."""
        return self._dead.listed()

    def dead_count(self) -> int:
        """How many dead letters this queue keeps."""
        return self._dead.count()

    def requeue_dead(self, ids: Iterable[int] | None = None) -> int:
        """Put dead letters back at the end of the queue with a fresh attempt count.

        ``ids`` chooses which (see :attr:`DeadLetter.id`); None means all. Unknown ids are
        skipped. Returns how many were requeued, in one commit.
        """
        return self._dead.requeue(None if ids is None else list(ids))

    def purge_dead(self, ids: Iterable[int] | None = None) -> int:
        """Delete dead letters for good (all when ``ids`` is None); return how many, in one
        commit."""
        return self._dead.purge(None if ids is None else list(ids))

    # -- lifecycle ------------------------------------------------------------------------------

    def shutdown(self, immediate: bool = False) -> None:
        """Refuse further puts; with ``immediate``, stop handing out items at once too.

        After a shutdown, ``put`` raises :class:`~ackqueue.ShutDown` at once; ``get`` goes on
        handing out what is ready and raises ``ShutDown`` when nothing is left. Blocked
        callers wake. With ``immediate=True`` gets raise at once and ``join()`` returns;
        unlike the standard library, the items are not destroyed: ready, delayed and held
        items all stay stored for the next start (held ones are given back, so their holders
        can no longer ack them). Acks of items still held keep working after a graceful
        shutdown.
        """
        self._closing.shutdown(immediate)

    def pause(self) -> None:
        """Hand out nothing until :meth:`resume`: gets wait, or time out, as on an empty queue;
        puts, acks and nacks go on. Stored, so the queue opens paused again, and seen by every
        process of a shared queue: once it returns, no process hands an item out."""
        self._closing.set_paused(True)

    def resume(self) -> None:
        """Hand items out again after :meth:`pause`; blocked gets wake."""
        self._closing.set_paused(False)

    @property
    def paused(self) -> bool:
        """True while the queue hands nothing out (:meth:`pause`; stored: every process sees it)."""
        return self._life.paused

    def pack(self) -> None:
        """Drop old revisions from the storage file, keeping only the live state."""
        self._life.check_open()
        self._store.pack()

    def close(self) -> None:
        """Give back held items and close the queue (and the file, with its last queue)."""
        with Shield(interruptible=False):
            try:
                if not self._closing.close(self._dropped.detach):
                    return
            except BaseException:
                # Closed all the same (a give-back that could not commit, the server gone):
                # the file is let go, so that the queue can be opened again in this process.
                self._let_go()
                raise
            self._let_go()

    def _let_go(self) -> None:
        status.beacon.detach(self)
        self._store.release(self.name)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._life.closed

    def __enter__(self) -> AckQueue[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._life.closed:
            state = "closed"
        else:
            state = f"{len(self._supply)} ready, {self._holds.count} held"
        return f"<{type(self).__name__} {self.name!r} in {self._store.where}: {state}>"

    # -- what the status file shows (see status.py) -----------------------------------------

    def status_snapshot(self) -> dict[str, Any]:
        """The held items, as the status file beside a live queue file lists them."""
        with self.mutex:
            return {"held": self._holds.snapshot_locked()}

    @property
    def storage_file(self) -> str | None:
        """The FileStorage file behind this queue, or None if it is not file-backed."""
        return self._store.file_path


class LifoAckQueue(AckQueue[T]):
    """Like ``queue.LifoQueue``: the most recently put item is delivered first."""

    _ordering = LifoOrdering


class PriorityAckQueue(AckQueue[T]):
    """Like ``queue.PriorityQueue``: the smallest item first (equal items in put order).

    Items must be mutually comparable, as for ``queue.PriorityQueue``; the usual form is a
    ``(priority, data)`` tuple.
    """

    _ordering = PriorityOrdering


class DeadLetters:
    def __init__(self, core: Core, puts: Puts) -> None:
        self._core = core
        self._puts = puts

    def listed(self) -> list[DeadLetter]:
        with self._core.signals.mutex:
            self._core.life.check_open()
            return self._core.book.dead_letters()

    def count(self) -> int:
        with self._core.signals.mutex:
            self._core.life.check_open()
            return self._core.book.dead_count()

    def requeue(self, ids: list[int] | None) -> int:
        with Shield(interruptible=False):  # stored and ready in memory, or neither
            return self._puts.requeue_dead(ids)

    def purge(self, ids: list[int] | None) -> int:
        self._core.life.check_open()
        book = self._core.book
        return book.store.run(book.purger(ids))


class GroupControl:
    def __init__(self, core: Core, rules: GroupRules) -> None:
        self._signals, self._life, self._tasks = core.signals, core.life, core.tasks
        self._book, self._supply, self._clock = core.book, core.supply, core.clock
        self._store, self._mode = core.book.store, core.mode
        self.rules = rules

    def pause(self, group: object, seconds: object) -> None:
        """No item of ``group`` is delivered for ``seconds`` from now (0 resumes it)."""
        name = check_named_group(group)
        span = checked_seconds("pause_group seconds", seconds)
        self._life.check_open()
        until = self._clock() + span if span else 0.0
        self._store.run(group_pauser(self._book, name, until))
        with self._signals.mutex:
            self._supply.pause_group_locked(name, until)

    def set(self, group: object, max_held: object, interval: object) -> None:
        """Store ``group``'s own settings, then apply them here."""
        name = check_named_group(group)
        own_max = group_rules(max_held, None).max_held
        own_interval = None if interval is None else checked_seconds("interval", interval)
        self._life.check_open()
        setting = (own_max, own_interval)
        self._store.run(group_setter(self._book, name, setting))
        with self._signals.mutex:
            if setting == (None, None):
                self.rules.own.pop(name, None)
            else:
                self.rules.own[name] = setting
            self._supply.group_changed_locked(name)

    def remove(self, group: object) -> int:
        """Remove every waiting item of ``group`` (held ones stay held); return how many."""
        name = check_named_group(group)
        self._life.check_open()
        return self._mode.remove_group(name, self._supply)


def takes_commit_nothing(queue: AckQueue[Any]) -> bool:
    """Whether a take on ``queue`` only touches memory (no stored hold, no durable delivery
    count): the queue's mode says."""
    return queue._mode.takes_commit_nothing


def join_unless(
    queue: AckQueue[Any], give_up: threading.Event | None, poll: float = 0.05
) -> None:
    """``queue.join()``; with ``give_up``, waiting in slices of ``poll`` seconds and returning
    once it is set, done or not (the asyncio queue's join, whose task was cancelled: a thread
    left waiting in a join would hold up the loop's shutdown for ever)."""
    done = queue.all_tasks_done
    with done:
        while queue.unfinished_tasks:
            queue._life.check_open()
            if give_up is not None and give_up.is_set():
                return
            done.wait(None if give_up is None else poll)


def ready_listeners(queue: AckQueue[Any]) -> ReadyListeners:
    """The listeners of ``queue``: a one-shot callback added there runs when an item may be
    ready (with the queue's mutex held, in the thread that made it ready)."""
    return queue._signals.listeners
