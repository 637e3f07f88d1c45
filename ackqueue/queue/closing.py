"""Stopping a queue: ``shutdown`` (no more puts; with ``immediate``, no more gets) and
``close`` (held items given back, the book closed), and pausing deliveries.

What each asks of the collaborators, in the order that keeps them consistent: a drain cut
halfway would leave the ``join()`` count wrong, and a close must give back holds before the
mode and the book close.
"""

from __future__ import annotations

from collections.abc import Callable

from ackqueue.base.interrupts import Shield
from ackqueue.base.timers import Timers
from ackqueue.delivery.holds import Holds
from ackqueue.queue.core import Core


class Closing:
    def __init__(self, core: Core, holds: Holds, timers: Timers) -> None:
        self._core = core
        self._holds = holds
        self._timers = timers

    def shutdown(self, immediate: bool) -> None:
        """See ``AckQueue.shutdown``."""
        core = self._core
        with Shield(interruptible=False), core.signals.mutex:
            life = core.life
            life.shut_down = True
            if immediate and not life.drained:
                life.drained = True
                forgotten = core.supply.drain_locked() + self._holds.drain_locked()
                core.tasks.finished_locked(forgotten)
                core.signals.all_tasks_done.notify_all()
            core.signals.wake_all_locked()

    def set_paused(self, paused: bool) -> None:
        """Stored first, so that every process (and the next open) sees it; then woken here."""
        core = self._core
        core.life.check_open()
        with Shield(interruptible=False):
            core.book.store.run(core.book.pauser(paused))
            with core.signals.mutex:
                core.life.paused = paused
                core.signals.wake_all_locked()

    def close(self, detach: Callable[[], object]) -> bool:
        """Give back every hold, stop the timers and close the mode and the book; ``detach``
        runs under the mutex once the queue counts as closed. False if it was closed already.
        Call it shielded from interrupts."""
        core = self._core
        with core.signals.mutex:
            if core.life.closed:
                return False
            for table in list(self._holds.tables):
                self._holds.release_locked(table)
            core.life.closed = True
            detach()
            self._timers.stop()
            core.signals.wake_all_locked()
        core.mode.close()
        core.book.close()
        return True
