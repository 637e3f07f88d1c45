"""Giving held items back when their holder goes away.

Three ways a holder goes away, each handled here or by storage layout:

* its consumer is closed, or garbage-collected while still holding items;
* the thread that connected it ends, normally or by an exception: a sentinel kept in a
  ``threading.local`` is freed when the thread's state is torn down, and its finalizer hands
  the holds back at once, with no polling and no call on the queue needed;
* the process dies: holds are never written to the database, so everything still stored is
  ready again the next time the queue is opened.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from ackqueue.delivery.holds import HoldTable

Release = Callable[[HoldTable, str], None]  # (table, name of the thread that ended)


class _ThreadSentinel:
    """Lives exactly as long as the thread that created it."""

    def __init__(self) -> None:
        self.tables: list[HoldTable] = []


def _release_all(
    release_ref: weakref.ReferenceType[Release], tables: list[HoldTable], thread: str
) -> None:
    release = release_ref()
    if release is not None:
        for table in tables:
            release(table, thread)


class ThreadExitWatch:
    """Calls ``release(table, thread name)`` for each watched table when a thread that
    watches it ends."""

    def __init__(self, release: Release) -> None:
        # A weak reference to a bound method: the watch must not keep its queue alive.
        self._release = weakref.WeakMethod(release)
        self._local = threading.local()

    def watch(self, table: HoldTable) -> None:
        """Watch ``table`` on behalf of the calling thread."""
        sentinel = getattr(self._local, "sentinel", None)
        if sentinel is None:
            sentinel = self._local.sentinel = _ThreadSentinel()
            thread = threading.current_thread().name
            weakref.finalize(sentinel, _release_all, self._release, sentinel.tables, thread)
        sentinel.tables[:] = [t for t in sentinel.tables if not t.closed]
        sentinel.tables.append(table)
