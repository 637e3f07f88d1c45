"""What the queue's operations (puts, claims, deliveries) work with: one queue's state objects.

Each of them owns its own state; this only hands the same ones to every operation, once, when
the queue opens (:mod:`.opening`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ackqueue.base.clock import Clock
from ackqueue.delivery.conditions import Lifecycle, Signals, Tasks
from ackqueue.delivery.metering import Meter
from ackqueue.delivery.mode import Mode
from ackqueue.delivery.supply import Supply
from ackqueue.queue.calls import Calls
from ackqueue.storage.book import Book


@dataclass(frozen=True)
class Core:
    signals: Signals  # the lock and conditions
    life: Lifecycle  # open, shut down, drained, paused
    tasks: Tasks  # the join() count
    book: Book  # the stored queue
    supply: Supply  # what can be handed out
    mode: Mode  # single-process or shared
    meter: Meter  # counts and timings
    calls: Calls  # what one thread's stdlib put or get carries to the hooks
    clock: Clock  # the queue's time
