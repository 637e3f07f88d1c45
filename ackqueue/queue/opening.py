"""Opening a queue: its book in the store, then the collaborators around it.

This is where the mode is chosen: :class:`~ackqueue.delivery.local.LocalMode` when this process
owns the database, :class:`~ackqueue.shared.mode.SharedMode` when processes share it. Every
collaborator is given what it works with here, once; none of them reaches into another.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ackqueue.base.clock import Clock
from ackqueue.base.timers import Timers
from ackqueue.delivery.holding import Holds
from ackqueue.delivery.local import LocalMode
from ackqueue.delivery.metering import Meter
from ackqueue.delivery.mode import Mode
from ackqueue.delivery.ordering import Ordering
from ackqueue.delivery.signals import Lifecycle, Signals, Tasks
from ackqueue.delivery.supply import Supply
from ackqueue.queue.calls import Calls
from ackqueue.queue.claiming import Claimer, StdlibGet
from ackqueue.queue.core import Core
from ackqueue.queue.deliveries import Deliveries
from ackqueue.queue.putting import Puts, StdlibPut
from ackqueue.queue.riding import Rides
from ackqueue.shared.mode import SharedMode
from ackqueue.storage.book import Book


@dataclass(frozen=True)
class Options:
    name: str
    maxsize: int
    max_attempts: int | None
    ack_timeout: float | None
    clock: Clock
    session_timeout: float
    shared: bool


@dataclass(frozen=True)
class Parts:
    """The collaborators of one open queue."""

    core: Core
    timers: Timers
    holds: Holds
    claimer: Claimer
    puts: Puts
    deliveries: Deliveries


def open_mode(
    book: Book, order: Ordering, signals: Signals, life: Lifecycle, opts: Options
) -> Mode:
    if opts.shared:
        return SharedMode(
            book, order, signals, life, opts.clock, opts.max_attempts, opts.session_timeout
        )
    return LocalMode(book, order, signals.mutex, opts.clock, opts.max_attempts)


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
    timers = Timers(signals.mutex, clock, opts.name)
    try:
        mode = open_mode(book, order, signals, life, opts)
    except BaseException:
        book.close()
        raise
    supply = Supply(signals, life, tasks, book, order, clock, timers, mode.new_index)
    holds = Holds(supply, timers, clock, opts.name, opts.ack_timeout)
    mode.on_session_lost(holds.void_locked)
    core = Core(signals, life, tasks, book, supply, mode, Meter(), Calls(), clock)
    claimer = Claimer(core, stdlib_get)
    puts = Puts(core, stdlib_put, order, opts.maxsize)
    rides = Rides(core, claimer, timers, holds.next_delivery_id, opts.max_attempts)
    deliveries = Deliveries(core, claimer, holds, opts.max_attempts, rides=rides)
    return Parts(core, timers, holds, claimer, puts, deliveries)


def signals_of(
    mutex: threading.Lock,
    not_empty: threading.Condition,
    not_full: threading.Condition,
    all_tasks_done: threading.Condition,
) -> Signals:
    """The standard library's lock and conditions, and ours: a get waiting for puts to land."""
    return Signals(mutex, not_empty, not_full, all_tasks_done, threading.Condition(mutex))
