"""A queue's dead letters through its API: listing, counting, requeueing and purging them.

The stored side (burying, the dead-letter tree) is :mod:`ackqueue.storage.deadletters`.
"""

from __future__ import annotations

from ackqueue.base.interrupts import Shield
from ackqueue.queue.core import Core
from ackqueue.queue.putting import Puts
from ackqueue.storage.deadletters import DeadLetter


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
