"""Group commit: changes from many threads share one ZODB commit, and so one fsync.

A caller hands :meth:`GroupCommitter.run` a *change*: a function that edits persistent objects
of the writer connection. The first caller to find no commit in flight becomes the leader: it
applies every change waiting at that moment, commits once, and wakes the others. Callers that
arrive during a commit wait for the next one. Each caller returns only when its own change is
durable, or raises the error that stopped it.

A change must only read and edit the database, so that it can be applied again after a
conflict; anything a caller does in memory happens after ``run`` returns.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import transaction
from ZODB.POSException import ConflictError
from ZODB.POSException import StorageError as POSStorageError

from .errors import QueueClosedError

log = logging.getLogger("ackqueue")

T = TypeVar("T")

MAX_CONFLICT_RETRIES = 50


class _Change:
    __slots__ = ("apply", "done", "error", "result")

    def __init__(self, apply: Callable[[], Any]) -> None:
        self.apply = apply
        self.done = False
        self.error: BaseException | None = None
        self.result: Any = None


class GroupCommitter:
    """Serialises changes to one connection and commits them in groups."""

    def __init__(
        self,
        transaction_manager: transaction.TransactionManager,
        describe_failure: Callable[[BaseException], BaseException],
    ) -> None:
        self._tm = transaction_manager
        self._describe_failure = describe_failure
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: list[_Change] = []
        self._busy = False
        self._closed = False
        self.commits = 0

    def run(self, apply: Callable[[], T]) -> T:
        """Apply ``apply`` in a commit shared with concurrent callers; return its result."""
        change = _Change(apply)
        with self._lock:
            self._check_open()
            self._pending.append(change)
            while self._busy and not change.done:
                self._idle.wait()
            if not change.done:
                if self._closed:
                    self._pending.remove(change)
                    self._check_open()
                self._busy = True
                batch, self._pending = self._pending, []
            else:
                batch = []
        if batch:
            try:
                self._commit(batch)
            finally:
                with self._lock:
                    self._busy = False
                    self._idle.notify_all()
        if change.error is not None:
            raise change.error
        return change.result

    def close(self) -> None:
        """Let the commit in flight finish, then refuse every change still waiting or to come.

        The connection is closed right after this; a commit still running on it, or one
        started by a waiting caller, would fail halfway with ZODB's internal errors.
        """
        with self._lock:
            self._closed = True
            while self._busy:
                self._idle.wait()
            self._idle.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError("the queue's storage was closed before this change committed")

    def _commit(self, batch: list[_Change]) -> None:
        try:
            for attempt in range(MAX_CONFLICT_RETRIES):
                try:
                    self._apply_and_commit(batch)
                    self.commits += 1
                    break
                except ConflictError:
                    self._tm.abort()
                    for change in batch:
                        change.error = None
                    # Exponential, capped: over ZEO several processes meet at the queue's head,
                    # and a round trip is milliseconds, so linear steps of 2 ms kept colliding.
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                    log.debug("conflict on commit, retrying (attempt %d)", attempt + 1)
            else:
                raise ConflictError("ackqueue: gave up after repeated write conflicts")
        except BaseException as exc:
            self._tm.abort()
            failure = self._describe_failure(exc)
            for change in batch:
                if change.error is None:
                    change.error = failure
            if not isinstance(exc, Exception):
                for change in batch:
                    change.done = True
                raise
        for change in batch:
            change.done = True

    def _apply_and_commit(self, batch: list[_Change]) -> None:
        self._tm.begin()
        for change in batch:
            try:
                change.result = change.apply()
            except (ConflictError, POSStorageError):  # the storage's fault (a ZEO server away)
                raise
            except Exception as exc:  # the change's own fault: it fails alone
                change.error = exc
        self._tm.commit()
