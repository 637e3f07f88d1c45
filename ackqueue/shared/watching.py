"""The watcher: wakes a ``get`` blocked in this process when another process commits.

ZODB has no change notification, but ZEO delivers invalidations to the client as the server
commits: the watcher notices that the database's last transaction id moved (a local read, no
round trip) every ``POLL_INTERVAL`` seconds and refreshes each shared queue's view, which
wakes its blocked gets. Storages that learn of other clients' commits only when a connection
polls (RelStorage) never move it by themselves, so the view is refreshed at least every
``REFRESH_AT_LEAST_EVERY`` seconds anyway, also while the last transaction id cannot be read.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Protocol

from ackqueue.errors import StorageError
from ackqueue.storage.store import Store


class Member(Protocol):
    """A shared queue as its session and watcher see it."""

    @property
    def name(self) -> str: ...

    def refresh(self) -> None:
        """Another process committed: look at the stored queue again, wake waiting gets."""

    def session_lost(self) -> None:
        """This process's session was reaped: whatever it held is void."""

log = logging.getLogger("ackqueue")

POLL_INTERVAL = 0.01
REFRESH_AT_LEAST_EVERY = 0.5


class Watcher:
    """A thread refreshing the shared queues of one database when its last commit moves."""

    def __init__(self, store: Store, queues: weakref.WeakSet[Member]) -> None:
        self._store = store
        self._queues = queues
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ackqueue-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        last, refreshed = None, time.monotonic()
        while not self._stop.wait(POLL_INTERVAL):
            try:
                tid = self._store.db.lastTransaction()
            except Exception:
                # A closing storage, or RelStorage's database-level cursor, which can stay
                # broken once its server restarted ("cursor already closed", at every call:
                # gets blocked here never saw the items put after the restart). Each queue
                # reads through connections of its own, which reconnect: refresh them at the
                # slow pace all the same.
                tid = last
            if tid != last or time.monotonic() - refreshed > REFRESH_AT_LEAST_EVERY:
                last, refreshed = tid, time.monotonic()
                self._refresh_queues()

    def _refresh_queues(self) -> None:
        # A method of its own so that no strong reference to a queue outlives the round: one
        # kept across the wait would keep a queue dropped without close() alive for good.
        for queue in list(self._queues):
            try:
                queue.refresh()
            except StorageError as exc:  # the server is away; the renewals say so
                log.debug("ackqueue: cannot refresh queue %r: %s", queue.name, exc)
            except Exception:  # pragma: no cover - a bug; keep watching the others
                log.exception("ackqueue: refreshing queue %r failed", queue.name)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
