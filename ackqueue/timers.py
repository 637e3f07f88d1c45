"""Deadlines of one queue (delayed items falling due, leases running out) on one thread.

The thread sleeps on a condition until the earliest deadline, or indefinitely when there is
none; adding an earlier deadline wakes it. There is no polling. Callbacks run with the queue's
mutex held, so they may move keys between the queue's in-memory structures and notify waiters.
With a :class:`~ackqueue.clock.ManualClock` no thread is started: advancing the clock fires
what fell due, in the advancing thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from .clock import Clock, _Listener

log = logging.getLogger("ackqueue")


class Timers(_Listener):
    def __init__(self, mutex: threading.Lock, clock: Clock, name: str) -> None:
        self._cond = threading.Condition(mutex)
        self._clock = clock
        self._name = name
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._manual = bool(getattr(clock, "manual", False))
        if self._manual:
            clock.subscribe(self)  # type: ignore[attr-defined]

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` (with the mutex held) once the clock reaches ``when``.

        The caller holds the mutex.
        """
        if self._stopped:
            return
        earliest = not self._heap or when < self._heap[0][0]
        heapq.heappush(self._heap, (when, next(self._order), callback))
        if self._manual:
            if when <= self._clock():
                self.fire_due()
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"ackqueue-timers-{self._name}", daemon=True
            )
            self._thread.start()
        elif earliest:
            self._cond.notify()

    def fire_due(self) -> None:
        """Run every callback whose time has come (the caller holds the mutex)."""
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            _when, _n, callback = heapq.heappop(self._heap)
            try:
                callback()
            except Exception:  # pragma: no cover - a bug; keep the other deadlines alive
                log.exception("ackqueue timer callback failed")

    def stop(self) -> None:
        """Drop every deadline and end the thread (the caller holds the mutex)."""
        self._stopped = True
        self._heap.clear()
        self._cond.notify_all()

    def on_time_moved(self) -> None:
        with self._cond:
            if not self._stopped:
                self.fire_due()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                self.fire_due()
                timeout = self._heap[0][0] - self._clock() if self._heap else None
                if timeout is None or timeout > 0:
                    self._cond.wait(timeout)
