"""Assembling a queue: its book in the store (:func:`open_book`), then the collaborators around
it (:func:`assemble`).

This is where the mode is chosen, once (:func:`mode_class`): :class:`~ackqueue.delivery.local.
LocalMode` when this process owns the database, :class:`~ackqueue.shared.mode.SharedMode` when
processes share it. The mode's keeping goes to the book, its indexing to the supply, its rides
to the deliveries and its stored holds to whoever settles or closes. Every collaborator is
given what it works with here, once; none of them reaches into another.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import ZODB

from ackqueue.base.clock import Clock
from ackqueue.base.timers import Timers
from ackqueue.delivery.conditions import Lifecycle, Signals, Tasks
from ackqueue.delivery.groups import GroupRules, group_rules
from ackqueue.delivery.holds import Holds
from ackqueue.delivery.local import LocalMode
from ackqueue.delivery.mode import Mode
from ackqueue.delivery.ordering import Ordering
from ackqueue.delivery.supply import Supply
from ackqueue.errors import StorageError
from ackqueue.queue.claiming import Claimer, StdlibGet
from ackqueue.queue.core import Calls, Core
from ackqueue.queue.deliveries import Deliveries
from ackqueue.queue.keying import Keys
from ackqueue.queue.lifecycle import Closing
from ackqueue.queue.metrics import Meter
from ackqueue.queue.putting import Puts, StdlibPut
from ackqueue.shared import wants_shared
from ackqueue.shared.mode import SharedMode
from ackqueue.storage.book import Book
from ackqueue.storage.engine import restricts
from ackqueue.storage.failures import connection_lost
from ackqueue.storage.items import PICKLE_CODEC, Codec
from ackqueue.storage.keys import remember_seconds
from ackqueue.storage.store import Store


@dataclass(frozen=True)
class Options:
    name: str
    maxsize: int
    max_attempts: int | None
    ack_timeout: float | None
    clock: Clock
    session_timeout: float
    shared: bool
    groups: GroupRules = GroupRules()
    unique: str | float | None = None  # the default scope of puts by key (keying.py)


@dataclass(frozen=True)
class Opened:
    """A queue's place in its database: the store (acquired), the claim on the queue's name
    in it, the queue's book, and whether processes share the queue."""

    store: Store
    claim: object
    book: Book
    shared: bool


def open_book(
    owner: Any,
    path: str | os.PathLike[str] | None,
    db: ZODB.DB | None,
    name: str,
    kind: str,
    class_name: str,
    durability: str,
    autopack: bool,
    shared: bool | None,
    codec: Codec = PICKLE_CODEC,
) -> Opened:
    """Acquire the store of ``path`` (or ``db``), claim ``name`` in it for ``owner`` and open
    the book of that name. If this fails, nothing stays acquired or claimed."""
    store = Store.acquire(path, db, durability=durability, autopack=autopack, shared=shared)
    try:
        claim = store.claim_name(name, owner)
    except BaseException:
        store.release()
        raise
    try:
        store.serializing(name, codec is PICKLE_CODEC)
        if codec is not PICKLE_CODEC and not restricts(store.db):
            raise ValueError(
                f"serializer {codec.name!r} with db= needs a database that loads only "
                f"ackqueue's records: open it with ZODB.DB(storage, "
                f"class_factory=ackqueue.restricted_class_factory)"
            )
    except BaseException:
        store.release(name)
        raise
    try:
        is_shared = wants_shared(store, shared)
        book = Book(store, name, kind, class_name, mode_class(is_shared).keeping, codec)
    except BaseException:
        store.release(name)
        raise
    return Opened(store, claim, book, is_shared)


T = TypeVar("T")
log = logging.getLogger("ackqueue")

# How long an open goes on trying while the server it talks to dies and is started again.
OPEN_THROUGH_RESTARTS_SECONDS = 30.0


def open_through_server_restarts(open_once: Callable[[], T], where: object) -> T:
    """``open_once()``, tried again while its server connection drops (a shared queue's
    server killed during the open: its clients start a new one); a
    :class:`~ackqueue.StorageError` once that goes on for
    :data:`OPEN_THROUGH_RESTARTS_SECONDS`. ``open_once`` leaves nothing acquired when it
    fails, and what it committed before failing is what a second open finds."""
    deadline = time.monotonic() + OPEN_THROUGH_RESTARTS_SECONDS
    while True:
        try:
            return open_once()
        except Exception as exc:
            lost = connection_lost(exc) or (
                exc.__cause__ is not None and connection_lost(exc.__cause__)
            )
            if not lost:
                raise
            if time.monotonic() > deadline:
                raise StorageError(
                    f"cannot open queue {where}: its server connection kept dropping for "
                    f"{OPEN_THROUGH_RESTARTS_SECONDS:.0f} s ({exc})"
                ) from exc
            log.info("ackqueue: the server of %s went away during the open; opening again: %s",
                     where, exc)
            time.sleep(0.05)  # the clients are starting a new server


@dataclass(frozen=True)
class Parts:
    """The collaborators of one open queue."""

    core: Core
    timers: Timers
    holds: Holds
    claimer: Claimer
    puts: Puts
    deliveries: Deliveries
    keys: Keys
    closing: Closing


def check_arguments(
    path: object, maxsize: object, name: object, db: object, shared: object, autopack: object,
    clock: object,
) -> None:
    """A clear error for a constructor argument of the wrong kind, before anything is opened
    (a ``TypeError`` for the wrong type, a ``ValueError`` for a wrong value of the right one);
    the path is checked and converted where the storage opens it (``storage/engine.py``)."""
    if isinstance(maxsize, bool) or not isinstance(maxsize, int):
        hint = (f"; a queue's name is given by keyword: name={maxsize!r}"
                if isinstance(maxsize, str) and not maxsize.strip().isdigit() else "")
        raise TypeError(f"maxsize must be an int (0 for no limit), not {maxsize!r}{hint}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__} {name!r}")
    if not name:
        raise ValueError("name must not be empty (the default queue is name='default')")
    if db is not None and not isinstance(db, ZODB.DB):
        raise TypeError(f"db must be a ZODB.DB or None, not {type(db).__name__} {db!r}")
    if db is not None and path is not None:
        raise ValueError(f"give a path or db=, not both (path {path!r}, db {db!r})")
    if shared is not None and not isinstance(shared, bool):
        raise TypeError(f"shared must be True, False or None (decide from the storage), "
                        f"not {shared!r}")
    if not isinstance(autopack, bool):
        raise TypeError(f"autopack must be True or False, not {autopack!r}")
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a function returning seconds (like time.time) or None, "
                        f"not {clock!r}")


def check_options(
    max_attempts: int | None, ack_timeout: float | None, session_timeout: float, unique: object,
    max_held_per_group: int | None, group_interval: float,
) -> GroupRules:
    """A clear error for a bad queue option, before anything is opened; the group rules."""
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise ValueError(f"max_attempts must be a positive int or None, not {max_attempts!r}")
    if ack_timeout is not None and not _positive_seconds(ack_timeout):
        raise ValueError(f"ack_timeout must be a positive number of seconds or None, "
                         f"not {ack_timeout!r}")
    if not _positive_seconds(session_timeout):
        raise ValueError(f"session_timeout must be a positive number of seconds, "
                         f"not {session_timeout!r}")
    remember_seconds(unique)
    return group_rules(max_held_per_group, group_interval)  # see docs/howto/crawler.rst


def _positive_seconds(value: object) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and value > 0  # type: ignore[operator]


def mode_class(shared: bool) -> type[LocalMode] | type[SharedMode]:
    """The mode of a queue: the one place that tells one process from several."""
    return SharedMode if shared else LocalMode


def open_mode(
    book: Book, order: Ordering, signals: Signals, life: Lifecycle, opts: Options
) -> Mode:
    if opts.shared:
        return SharedMode(
            book, order, signals, life, opts.clock, opts.max_attempts, opts.session_timeout,
            opts.groups,
        )
    return LocalMode(book, order, signals.mutex, opts.clock, opts.max_attempts, opts.groups)


def assemble(
    signals: Signals,
    book: Book,
    order: Ordering,
    life: Lifecycle,
    tasks: Tasks,
    opts: Options,
    stdlib_get: StdlibGet,
    stdlib_put: StdlibPut,
) -> Parts:
    """The queue's collaborators, once the standard library has made its mutex (``signals``).
    If this fails, the book is closed."""
    clock = opts.clock
    book.clock = clock
    timers = Timers(signals.mutex, clock, opts.name)
    try:
        mode = open_mode(book, order, signals, life, opts)
    except BaseException:
        book.close()
        raise
    supply = Supply(
        signals, life, tasks, book, order, clock, timers, mode.indexing
    )
    holds = Holds(supply, timers, opts.name, opts.ack_timeout)
    mode.stored_holds.on_session_lost(holds.void_locked)
    core = Core(signals, life, tasks, book, supply, mode, Meter(), Calls(), clock)
    claimer = Claimer(core, stdlib_get)
    puts = Puts(core, stdlib_put, order, opts.maxsize)
    rides = mode.rides(supply, timers, claimer.claim_ready, holds.next_delivery_id)
    deliveries = Deliveries(core, claimer, holds, opts.max_attempts, rides)
    keys = Keys(core, puts, opts.unique)
    closing = Closing(core, holds, timers)
    return Parts(core, timers, holds, claimer, puts, deliveries, keys, closing)


def signals_of(
    mutex: threading.Lock,
    not_empty: threading.Condition,
    not_full: threading.Condition,
    all_tasks_done: threading.Condition,
) -> Signals:
    """The standard library's lock and conditions, and ours: a get waiting for puts to land."""
    return Signals(mutex, not_empty, not_full, all_tasks_done, threading.Condition(mutex))
