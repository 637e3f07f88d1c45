"""The lifecycle of a queue: stopping it, pausing it, and letting go of one dropped unclosed.

``shutdown`` stops puts (with ``immediate``, gets too), ``close`` gives held items back and
closes the book, ``pause``/``resume`` stop and restart deliveries. Each asks the collaborators
in the order that keeps them consistent: a drain cut halfway would leave the ``join()`` count
wrong, and a close must give back holds before the mode and the book close.

Code written for ``queue.Queue`` never closes its queues. When such a queue is garbage-collected
its reader connection is closed, its name is free again, and, with the last queue of a file,
the file is closed and unlocked, so the same process or another one can open it. What it held
goes back as on close: in one process holds live only in memory, so the stored entries are
ready for whoever opens the queue next; in shared mode its stored holds are given back (what
the mode's ``stored_holds.dropped()`` returns).

The finalizer runs wherever the collector ran, possibly in a thread in the middle of a commit or
holding the registry lock, where closing the file would deadlock. There the work is handed to a
short-lived thread; in an ordinary caller thread (``del q; gc.collect()``) it is done at once,
so the file is free when the collection returns.

A child made by ``fork`` inherits the parent's open queues, but not their files, sessions or
threads: each counts as closed there (its operations say so, naming the process that opened
it), and nothing the child does, a collection or its exit included, closes, commits or gives
back anything of the parent's (see also ``Store.inherited`` and ``sessions.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ackqueue.base.interrupts import Shield
from ackqueue.base.timers import Timers
from ackqueue.delivery.conditions import Lifecycle, Signals
from ackqueue.delivery.holds import Holds
from ackqueue.queue import status
from ackqueue.queue.core import Core
from ackqueue.storage.store import Store

INTERNAL_THREADS = "ackqueue-"  # the prefix of every thread ackqueue starts

Step = Callable[[], None]


@dataclass(frozen=True)
class Left:
    """What a dropped queue leaves open, and how to let go of it (nothing leads back to the
    queue, or it would never be collected)."""

    store: Store
    name: str
    claim: object
    close_book: Step
    status_file: str | None
    give_back: Step | None  # stored holds to give back (shared mode), which commits

    def clean_up(self) -> None:
        try:
            self.close_book()
        finally:
            try:
                if self.give_back is not None:
                    self.give_back()
            finally:
                if self.status_file is not None:
                    status.beacon.forget_dropped(self.status_file)
                self.store.release_dropped(self.name, self.claim)


# This process's queues, each with its lifecycle, its lock and conditions, its finalizer and
# the process that opened it: a child made by fork closes them there (_inherited_by_fork).
_opened: weakref.WeakKeyDictionary[
    object, tuple[Lifecycle, Signals, weakref.finalize[..., Any], int]
]
_opened = weakref.WeakKeyDictionary()


def watch(
    queue: status.Reporting,
    life: Lifecycle,
    signals: Signals,
    store: Store,
    name: str,
    claim: object,
    close_book: Step,
    give_back: Step | None,
) -> weakref.finalize[..., Any]:
    """Clean up after ``queue`` if it is collected while open; ``close()`` detaches this."""
    left = Left(store, name, claim, close_book, queue.storage_file, give_back)
    finalizer = weakref.finalize(queue, _dropped, left)
    finalizer.atexit = False  # at exit, store.py and sessions.py close everything anyway
    _opened[queue] = (life, signals, finalizer, store.opened_in)
    return finalizer


def _inherited_by_fork() -> None:
    """In a child just made by fork: every queue of the parent counts as closed here, and its
    collection here gives nothing back (the parent's holds and files are the parent's); its
    lock is free, so that its operations get as far as saying so."""
    for life, signals, finalizer, pid in list(_opened.values()):
        finalizer.detach()
        signals.reset_after_fork()
        life.closed = True
        life.opened_by = pid


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_inherited_by_fork)


def _dropped(left: Left) -> None:
    if left.give_back is None and _can_close_here(left.store):
        left.clean_up()
        return
    # At interpreter shutdown no thread can start; the exit handlers close the storage.
    with contextlib.suppress(RuntimeError):
        threading.Thread(target=left.clean_up, name="ackqueue-dropped", daemon=True).start()


def _can_close_here(store: Store) -> bool:
    """Whether this thread may close the store: it is no thread of ours (a packer, a session,
    a timer, mid-commit work) and the registry is not locked (by this thread, maybe)."""
    if threading.current_thread().name.startswith(INTERNAL_THREADS):
        return False
    return store.registry_free()


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
        try:
            core.mode.stored_holds.close()  # may commit (give-backs), and fail: server gone
        finally:
            core.book.close()
        return True
