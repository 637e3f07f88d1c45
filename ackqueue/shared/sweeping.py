"""The sweeper: deletes the entries that shared-mode acks only marked done.

An ack in shared mode marks its entry done (:meth:`~ackqueue.storage.book.Book.retire_entry`)
instead of deleting it from the entries tree, because deletes at the head of a BTree conflict
with every other change to the same bucket or tree node. One process at a time, the one whose
session id sorts first among the live sessions, deletes the done entries near the head of each
queue every :data:`SWEEP_SECONDS`, many in one commit on its session's own connection. A
conflict with a put at the tail is retried by the session's commit loop.

Until they are swept, done entries are skipped by every reader (the count dropped at the ack);
a plain single-process open deletes any left over before it reads the backlog.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ackqueue.records import queues_of
from ackqueue.storage.book import sweep_done

log = logging.getLogger("ackqueue")

T = TypeVar("T")

SWEEP_SECONDS = 0.05
# Keys looked at from the head of each queue per round: a hold kept long keeps its entry at
# the head, and the done entries behind it must still be found; past this many, the next
# round goes on (most entries there are cached and unchanged, so looking is cheap).
SWEEP_SCAN = 1000


class Committer(Protocol):
    """What the sweeper needs of its session."""

    def first_live(self) -> bool:
        """Inside a change: whether this session's id sorts first among the live ones."""
        ...

    def root(self) -> Any: ...

    def commit(self, change: Callable[[], T]) -> T: ...


class Sweeper:
    """A thread sweeping done entries while this session is the first live one."""

    def __init__(self, session: Committer, interval: float = SWEEP_SECONDS) -> None:
        self._session = session
        self._interval = interval
        self._stop = threading.Event()
        self.swept = 0
        self._thread = threading.Thread(target=self._sweep, name="ackqueue-sweep", daemon=True)
        self._thread.start()

    def _sweep(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.swept += self._session.commit(self.sweep_once)
            except Exception as exc:  # the server is away (the renewals say so), or closing
                log.debug("ackqueue: sweeping deferred: %s", exc)

    def sweep_once(self) -> int:
        """Inside a change on the session's connection: sweep every queue, if it is our turn."""
        if not self._session.first_live():
            return 0
        root = self._session.root()
        queues = queues_of(root, create=False)
        if queues is None:
            return 0
        swept = 0
        for record in queues.values():
            if record.done_marks:
                swept += sweep_done(record, SWEEP_SCAN)
        return swept

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
