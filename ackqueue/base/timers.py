"""Deadlines of one queue (delayed items falling due, leases running out) on one thread.

A deadline is either a duration's end on the monotonic clock (:meth:`Timers.at`) or a stored
due time on the wall clock (:meth:`Timers.at_wall`). The thread sleeps on a condition until the
earliest deadline, or indefinitely when there is none; adding an earlier deadline wakes it.
The only polling: while a wall-clock deadline is pending, the thread looks at the wall clock
again every ``WALL_RECHECK_SECONDS``, so that a forward step of it is seen. Callbacks run with
the queue's mutex held, so they may move keys between the queue's in-memory structures and
notify waiters.
With a :class:`~ackqueue.clock.ManualClock` no thread is started: advancing the clock fires
what fell due, in the advancing thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ackqueue.base.clock import WALL_RECHECK_SECONDS, Clock, _Listener, durations_clock

log = logging.getLogger("ackqueue")

Timer = list[Any]


class Timers(_Listener):
    def __init__(self, mutex: threading.Lock, clock: Clock, name: str) -> None:
        self._cond = threading.Condition(mutex)
        self._clock = clock
        self._monotonic = durations_clock(clock)
        self._name = name
        # Entries are [when, order, callback]; a cancelled entry's callback is None. ``_heap``
        # holds monotonic deadlines, ``_wall`` wall-clock ones.
        self._heap: list[list[Any]] = []
        self._wall: list[list[Any]] = []
        self._cancelled = 0
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._manual = bool(getattr(clock, "manual", False))
        if self._manual:
            clock.subscribe(self)  # type: ignore[attr-defined]

    def at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` (with the mutex held) once the monotonic clock
        (:meth:`monotonic`) reaches ``when``: the end of a duration.

        The caller holds the mutex. The result can be passed to :meth:`cancel`.
        """
        return self._add(self._heap, self._monotonic, when, callback)

    def at_wall(self, when: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` (with the mutex held) once the wall clock reaches ``when``: a
        stored due time (a step of the wall clock moves it, see ackqueue.base.clock)."""
        return self._add(self._wall, self._clock, when, callback)

    def monotonic(self) -> float:
        """Now, on the clock of :meth:`at`."""
        return self._monotonic()

    def _add(
        self, heap: list[Timer], clock: Clock, when: float, callback: Callable[[], None]
    ) -> Timer:
        entry: Timer = [when, next(self._order), callback]
        if self._stopped:
            return entry
        earliest = not heap or when < heap[0][0]
        heapq.heappush(heap, entry)
        if self._manual:
            if when <= clock():
                self.fire_due()
            return entry
        if self._thread is None:
            self._thread = threading.Thread(
                target=_run,
                args=(weakref.ref(self),),
                name=f"ackqueue-timers-{self._name}",
                daemon=True,
            )
            self._thread.start()
            # The thread keeps only a weak reference (the callbacks lead back to the queue, and
            # a queue dropped without close() must be collectable); wake it to see it is gone.
            weakref.finalize(self, _wake, self._cond).atexit = False
        elif earliest:
            self._cond.notify()
        return entry

    def cancel(self, entry: Timer) -> None:
        """Forget a deadline (the caller holds the mutex).

        Cancelled entries stay in the heap until due, so that cancelling costs O(1); when
        they outnumber the live ones the heap is rebuilt, which keeps memory bounded by the
        live deadlines even with long leases and many acks.
        """
        if entry[2] is None:
            return
        entry[2] = None
        self._cancelled += 1
        if self._cancelled > 1024 and self._cancelled * 2 > len(self._heap) + len(self._wall):
            self._heap = [e for e in self._heap if e[2] is not None]
            self._wall = [e for e in self._wall if e[2] is not None]
            heapq.heapify(self._heap)
            heapq.heapify(self._wall)
            self._cancelled = 0

    def fire_due(self) -> None:
        """Run every callback whose time has come (the caller holds the mutex)."""
        self._fire(self._heap, self._monotonic)
        self._fire(self._wall, self._clock)

    def _fire(self, heap: list[Timer], clock: Clock) -> None:
        now = clock()
        while heap and heap[0][0] <= now:
            _when, _n, callback = heapq.heappop(heap)
            if callback is None:
                self._cancelled -= 1
                continue
            try:
                callback()
            except Exception:  # pragma: no cover - a bug; keep the other deadlines alive
                log.exception("ackqueue timer callback failed")

    def wait_seconds(self) -> float | None:
        """How long the thread may sleep before a deadline may have come (None: no deadline)."""
        waits = []
        if self._heap:
            waits.append(self._heap[0][0] - self._monotonic())
        if self._wall:
            waits.append(min(self._wall[0][0] - self._clock(), WALL_RECHECK_SECONDS))
        return min(waits) if waits else None

    def stop(self) -> None:
        """Drop every deadline and end the thread (the caller holds the mutex)."""
        self._stopped = True
        self._heap.clear()
        self._wall.clear()
        self._cancelled = 0
        self._cond.notify_all()

    def on_time_moved(self) -> None:
        with self._cond:
            if not self._stopped:
                self.fire_due()


def _run(ref: weakref.ReferenceType[Timers]) -> None:
    timers = ref()
    if timers is None:
        return
    cond = timers._cond
    with cond:
        while not timers._stopped:
            timers.fire_due()
            timeout = timers.wait_seconds()
            del timers  # no strong reference while waiting
            if timeout is None or timeout > 0:
                cond.wait(timeout)
            timers = ref()
            if timers is None:
                return


def _wake(cond: threading.Condition) -> None:
    """The timers were collected: wake their thread so it ends. Never block here (see
    ackqueue.queue.lifecycle); if the lock is busy, its holder is that thread, which will see it."""
    if cond.acquire(blocking=False):
        try:
            cond.notify_all()
        finally:
            cond.release()
