"""The sweeper: deletes the entries that shared-mode acks only marked done.

An ack in shared mode marks its entry done (:meth:`~ackqueue.storage.book.Book.retire_entry`)
instead of deleting it from the entries tree, because deletes at the head of a BTree conflict
with every other change to the same bucket or tree node. One process at a time, the one whose
session id sorts first among the live sessions, deletes the done entries near the head of each
queue every :data:`SWEEP_SECONDS`, many in one commit, on a connection of its own (not the
session's: a slow sweep must never delay a lease renewal). A conflict with a put at the tail
is retried.

Until they are swept, done entries are skipped by every reader (the count dropped at the ack);
a plain single-process open deletes any left over before it reads the backlog.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any, Protocol

import transaction
from ZODB.POSException import ConflictError

from ackqueue.records import queues_of
from ackqueue.storage.book import sweep_done
from ackqueue.storage.failures import abort_quietly

log = logging.getLogger("ackqueue")

SESSIONS_KEY = "ackqueue.sessions"  # the tree of live sessions (sessions.py)
SWEEP_RETRIES = 5

SWEEP_SECONDS = 0.1
# Keys looked at from the head of each queue per round: a hold kept long keeps its entry at
# the head, and the done entries behind it must still be found; past this many, the next
# round goes on (most entries there are cached and unchanged, so looking is cheap).
SWEEP_SCAN = 1000
# Most rounds stop after this many entries in a row that nobody holds and that are not done
# (the consumers have not come that far; see sweep_done): looking further loaded entries only
# to load them again once done (2 of the 5.8 loads an item of a get + ack, two fifths of them
# from the wide rounds, before). Every WIDE_EVERY-th round looks at all SWEEP_SCAN, for done
# entries past such a run (an item taken out of order, as a steal does).
SWEEP_GAP = 8
NOT_OUR_TURN_SECONDS = 1.0
WIDE_EVERY = 200


class Session(Protocol):
    """What the sweeper needs of its session."""

    @property
    def sid(self) -> str: ...


class Sweeper:
    """A thread sweeping done entries while this session is the first live one."""

    def __init__(self, db: Any, session: Session, interval: float = SWEEP_SECONDS) -> None:
        self._db = db
        self._session = session
        self._interval = interval
        self._stop = threading.Event()
        self.swept = 0
        self._rounds = 0
        self._turn = False
        # Opened here, while the queue opens (which needs the server anyway), not in the thread:
        # a thread that got to it only once the server had gone away died of the error, and
        # the half-opened connection it left in the database's pool failed the queue's close.
        self._tm = transaction.TransactionManager()
        self._conn = db.open(transaction_manager=self._tm)
        self._thread = threading.Thread(target=self._sweep, name="ackqueue-sweep", daemon=True)
        self._thread.start()

    def _sweep(self) -> None:
        tm, conn = self._tm, self._conn
        wait = self._interval
        try:
            while not self._stop.wait(wait):
                try:
                    self.swept += self._commit(tm, lambda: self.sweep_once(conn.root()))
                except Exception as exc:  # the server is away (the renewals say so), or closing
                    log.debug("ackqueue: sweeping deferred: %s", exc)
                # Not our turn: look again later (the first session changes only when one
                # ends or is reaped, which takes a lease anyway).
                wait = self._interval if self._turn else NOT_OUR_TURN_SECONDS
        finally:
            abort_quietly(tm)
            conn.close()

    def _commit(self, tm: Any, change: Callable[[], int]) -> int:
        for attempt in range(SWEEP_RETRIES):
            try:
                tm.begin()
                result = change()
                tm.commit()
                return result
            except ConflictError:
                tm.abort()
                if self._stop.wait(random.uniform(0, min(0.05, 0.001 * 2**attempt))):
                    return 0
            except BaseException:
                abort_quietly(tm)
                raise
        return 0  # the next round tries again

    def sweep_once(self, root: Any) -> int:
        """Inside a change: sweep every queue of ``root``'s database, if it is our turn."""
        sessions = root.get(SESSIONS_KEY)
        self._turn = bool(sessions) and sessions.minKey() == self._session.sid
        if not self._turn:
            return 0
        queues = queues_of(root, create=False)
        if queues is None:
            return 0
        swept = 0
        self._rounds += 1
        gap = None if self._rounds % WIDE_EVERY == 0 else SWEEP_GAP
        for record in queues.values():
            if record.done_marks:
                swept += sweep_done(record, SWEEP_SCAN, gap)
        return swept

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
