"""Time as the queue sees it: wall-clock epoch seconds where time is stored, a monotonic
clock for durations inside one process; both injectable for tests.

What is stored must mean the same after a restart and in another process, so a delayed item's
due time (``not_before``), a snoozed group's end and a stored lease are epoch times from the
queue's ``clock`` (``time.time`` by default). A duration measured inside one process (a lease's
``ack_timeout``, ``group_interval``, a wait) runs on :func:`durations_clock` instead, so that a
step of the wall clock (NTP, a suspended VM, an operator) neither freezes it nor cuts it short.

A stored due time stays a wall-clock time: when the wall clock steps forward past it, the item
falls due (a running queue notices within :data:`WALL_RECHECK_SECONDS`), as it would if the
queue were reopened then; a backward step postpones it by the step. A snooze read back from the
store at open is turned into a duration from then.

Tests pass a :class:`ManualClock` and move time by hand (it is both clocks): every queue using
it fires what fell due at once, in the thread that advanced it. A clock object may carry its own
``monotonic`` function for durations; without one, durations use ``time.monotonic``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

Clock = Callable[[], float]

# How often a waiting timer thread reads the wall clock again while a stored due time is
# pending: no system call says when the wall clock was stepped.
WALL_RECHECK_SECONDS = 1.0


def durations_clock(clock: Clock) -> Clock:
    """The monotonic clock that measures durations for a queue whose wall clock is ``clock``."""
    monotonic: Clock = getattr(clock, "monotonic", time.monotonic)
    return monotonic


class ManualClock:
    """A clock that moves only when :meth:`advance` is called.

    Pass it as ``AckQueue(..., clock=ManualClock())`` to test delays, leases and retries
    without waiting. ``start`` is its first reading, in epoch seconds (default: now).
    """

    manual = True

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()
        self._listeners: weakref.WeakSet[_Listener] = weakref.WeakSet()

    def __call__(self) -> float:
        return self._now

    def monotonic(self) -> float:
        """Durations move with the same hand."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward and let every queue on this clock act on what fell due."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            self._now += seconds
            listeners = list(self._listeners)
        for listener in listeners:
            listener.on_time_moved()

    def subscribe(self, listener: _Listener) -> None:
        """Have ``listener.on_time_moved()`` called each time the clock is advanced."""
        with self._lock:
            self._listeners.add(listener)


class _Listener:
    def on_time_moved(self) -> None:
        raise NotImplementedError
