"""What one consumer holds: delivered items awaiting their ack, found by identity or by id."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """One hand-out of an item to a consumer.

    ``id`` names this delivery for :meth:`Consumer.ack_id`; ``attempts`` counts the deliveries
    of the item so far, this one included; ``got_at`` is a ``time.time()`` stamp.
    """

    id: int
    item: Any
    attempts: int
    got_at: float


@dataclass(eq=False)
class Hold:
    key: Any
    delivery: Delivery
    settling: bool = False
    deadline: float | None = None  # when the lease runs out (ack_timeout), epoch seconds
    lease_timer: Any = None  # the timers entry of that deadline, cancelled when settled


# Holds taken back by a lease are remembered, so the late holder's ack can say what happened.
EXPIRED_MEMORY = 1024


@dataclass(eq=False)
class HoldTable:
    """The holds of one consumer. Guarded by its queue's mutex."""

    owner: str = field(default_factory=lambda: threading.current_thread().name)
    owner_kind: str = "thread"  # or "task": an AsyncConsumer's holds are its task's

    @property
    def holder(self) -> str:
        """Who holds this table's items, as messages say it: ``thread 'worker-1'``."""
        return f"{self.owner_kind} {self.owner!r}"
    watched: set[int] = field(default_factory=set)  # threads whose end closes it
    by_id: dict[int, Hold] = field(default_factory=dict)
    by_object: dict[int, list[Hold]] = field(default_factory=dict)
    closed: bool = False
    closed_because: str = "it was closed"  # why, for the error of a later call
    expired: deque[Hold] = field(default_factory=lambda: deque(maxlen=EXPIRED_MEMORY))

    def add(self, key: Any, delivery: Delivery) -> Hold:
        hold = Hold(key, delivery)
        self.by_id[delivery.id] = hold
        self.by_object.setdefault(id(delivery.item), []).append(hold)
        return hold

    def find(self, item: Any) -> Hold | None:
        """The oldest unsettled hold of this very object."""
        for hold in self.by_object.get(id(item), ()):
            if not hold.settling:
                return hold
        return None

    def remove(self, hold: Hold) -> None:
        del self.by_id[hold.delivery.id]
        same = self.by_object[id(hold.delivery.item)]
        same.remove(hold)
        if not same:
            del self.by_object[id(hold.delivery.item)]

    def find_expired(self, item: Any) -> Hold | None:
        """A hold of this very object that its lease took back, forgotten once reported."""
        for hold in self.expired:
            if hold.delivery.item is item:
                self.expired.remove(hold)
                return hold
        return None

    def take_all_unsettled(self) -> list[Hold]:
        """Remove and return every hold not being settled right now."""
        taken = [hold for hold in self.by_id.values() if not hold.settling]
        for hold in taken:
            self.remove(hold)
        return taken

    def ages(self) -> list[tuple[Delivery, float]]:
        now = time.time()
        return [(h.delivery, now - h.delivery.got_at) for h in self.by_id.values()]
