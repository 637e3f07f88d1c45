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

import io
import itertools
import logging
import random
import threading
import time
import traceback
from _thread import allocate_lock as _new_lock
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import transaction
from transaction._transaction import Status
from ZODB.POSException import ConflictError
from ZODB.POSException import StorageError as POSStorageError

from ackqueue.errors import QueueClosedError
from ackqueue.storage.failures import abort_quietly, committed_despite

log = logging.getLogger("ackqueue")

T = TypeVar("T")

MAX_CONFLICT_RETRIES = 50

# How long a leader waits for the callers of the previous group to come back before it
# commits. A thread that just returned from a commit usually comes back with its next change
# within a fraction of a millisecond (a consumer acks, a producer puts again); committing
# without them would split one group into several small commits, each paying its own fsync
# and its own rewrite of the same tree nodes. Only waited when the previous group had more
# than one change, so a lone caller never waits.
GATHER_SECONDS = 0.001


class Syncer(Protocol):
    """A storage whose commits can leave their fsync for later (see filestorage.py)."""

    def deferring_sync(self) -> AbstractContextManager[None]: ...

    def flushed(self) -> int: ...

    def sync_through(self, mark: int) -> None: ...


class WriterTransactions(transaction.TransactionManager):
    """The explicit transaction manager of a store's writer connection, which commits by
    driving the writer's two-phase commit itself.

    The writer is the only connection opened with this manager, and ackqueue adds neither
    hooks nor savepoints to its transactions: each commit has exactly one data manager and one
    synchronizer, both the writer. ``Transaction.commit`` serves any number of them (sorted by
    key, hooks, savepoints, a synchronizer call before and after, debug logging, the clean-up
    of each list): 4 us of every put and ack, 3 % of their CPU (of a 42 us Connection commit
    of one small object, 4 us). The steps here are the ones it takes for that one data
    manager, in its order; on failure, its clean-up (``abort`` unless the writer voted, then
    ``tpc_abort``), and the transaction is left for the caller to abort, as it is after a
    failed ``Transaction.commit``. Whatever is more than that (another data manager or
    synchronizer, a hook, a savepoint, a doom, a failed commit, nothing changed) is committed
    by the package itself. A transaction begins as the package begins it, with the call to
    the writer (its one synchronizer) made directly.
    """

    def __init__(self) -> None:
        super().__init__(explicit=True)
        self.writer: Any = None  # the connection opened with this manager, once it is
        self._synchs_registered = 0

    def registerSynch(self, synch: Any) -> None:  # noqa: N802 (the interface's name)
        super().registerSynch(synch)
        self._synchs_registered += 1

    def unregisterSynch(self, synch: Any) -> None:  # noqa: N802
        super().unregisterSynch(synch)
        self._synchs_registered -= 1

    def begin(self) -> Any:
        writer = self.writer
        begun = self._txn  # type: ignore[has-type]  # (the package's own attribute)
        if writer is None or self._synchs_registered != 1 or begun is not None:
            return super().begin()  # or its AlreadyInTransaction
        # The package's begin, less the walk of its weak set of synchronizers (a list of
        # weak references and a lambda each time) to reach the one there is.
        txn = self._txn = transaction.Transaction(self._synchs, self)
        writer.newTransaction(txn)
        return txn

    def abort(self) -> None:
        """Abort the transaction begun; with none begun, nothing (an explicit manager of the
        package raises ``NoTransaction``). ``ZODB.DB.close`` aborts every connection's manager,
        begun or not: a caller's ``db.close()`` under an open queue raised it halfway, and
        left the database half closed, its storage (and its file's lock) open for good."""
        if self._txn is None:
            return
        super().abort()

    def commit(self) -> None:
        txn = self.get()
        writer = self.writer
        if writer is None or self._synchs_registered != 1 or not _writer_alone(txn, writer):
            txn.commit()
            return
        txn.status = Status.COMMITTING
        _commit_one(writer, txn)
        txn.status = Status.COMMITTED
        writer.afterCompletion(txn)  # the synchronizer call after a commit (the cache's GC)
        self.free(txn)


def _writer_alone(txn: Any, writer: Any) -> bool:
    """Whether ``txn`` is active, with ``writer`` as its one data manager, no hooks and no
    savepoints (the ``transaction`` package's own attributes, 4.x to 5.x; any missing: no)."""
    try:
        return (
            txn.status is Status.ACTIVE
            and len(txn._resources) == 1
            and txn._resources[0] is writer
            and not (txn._before_commit or txn._after_commit or txn._savepoint2index)
        )
    except AttributeError:
        return False


def _commit_one(manager: Any, txn: Any) -> None:
    """The two-phase commit of one data manager; on failure, its clean-up, then the error."""
    voted = False
    try:
        manager.tpc_begin(txn)
        manager.commit(txn)
        manager.tpc_vote(txn)
        voted = True
        manager.tpc_finish(txn)
    except BaseException:
        if voted:
            log.critical("A storage error occurred during the second phase of the two-phase "
                         "commit. Resources may be in an inconsistent state.")
        else:
            _quietly(manager.abort, txn)
        _quietly(manager.tpc_abort, txn)
        # As after the package's failed commit: only an abort may follow (a commit or a join
        # raises TransactionFailedError, with this traceback).
        txn._failure_traceback = io.StringIO(traceback.format_exc())
        txn.status = Status.COMMITFAILED
        raise


def _quietly(step: Callable[[Any], Any], txn: Any) -> None:
    """A clean-up step after a failed commit: its own error is logged, the commit's raised."""
    try:
        step(txn)
    except Exception:
        log.error("ackqueue: %s after a failed commit failed", step.__name__, exc_info=True)


class CommitHooks(Protocol):
    """Called around each commit attempt, in the committing thread (see counts.py)."""

    def begin(self) -> None: ...

    def before_commit(self) -> None: ...

    def committed(self) -> None: ...

    def aborted(self) -> None: ...


class _Change:
    __slots__ = ("apply", "done", "error", "result", "taken", "wake")

    def __init__(self, apply: Callable[[], Any]) -> None:
        self.apply = apply
        self.taken = False  # in a group being committed
        self.done = False  # durable, or failed
        self.error: BaseException | None = None
        self.result: Any = None
        self.wake: Any = None  # held while its caller sleeps; released to wake it


class GroupCommitter:
    """Serialises changes to one connection and commits them in groups.

    With a :class:`Syncer` storage, a group's fsync runs after the commit lock is released:
    the next group commits while this one is being fsynced, and each caller still returns
    only once its change is on disk.

    A waiting caller sleeps on a lock of its own and is woken only when it has something to
    do: when its group is done, or (the first one waiting) when the commit in flight has
    finished and it is to lead the next group. Waking every waiter at each step instead (a
    shared condition's notify_all) cost each of them a futex wake and a GIL hand-over for
    nothing, which with 8 threads was a tenth of the CPU per item.
    """

    def __init__(
        self,
        transaction_manager: transaction.TransactionManager,
        describe_failure: Callable[[BaseException], BaseException],
        syncer: Syncer | None = None,
        hooks: CommitHooks | None = None,
        last_commit: Callable[[], object] | None = None,
    ) -> None:
        """``last_commit``: the database's latest commit (``DB.lastTransaction``), which says
        whether a change that failed ran on a view that has moved on since."""
        self._tm = transaction_manager
        self._hooks = hooks
        self._last_commit = last_commit
        self._describe_failure = describe_failure
        self._syncer = syncer
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._arrived = threading.Condition(self._lock)
        self._pending: list[_Change] = []
        self._busy = False
        self._syncing = 0  # groups committed, being fsynced
        self._closed = False
        self._gathering = False
        self._last_batch = 1
        self.commits = 0

    def run(self, apply: Callable[[], T]) -> T:
        """Apply ``apply`` in a commit shared with concurrent callers; return its result."""
        change = _Change(apply)
        batch: list[_Change] = []
        with self._lock:
            self._check_open()
            self._pending.append(change)
            if self._gathering and len(self._pending) >= self._last_batch:
                self._arrived.notify()
            while not change.done:
                if not change.taken and not self._busy:
                    if self._closed:
                        self._pending.remove(change)
                        self._check_open()
                    batch = self._lead()
                    break
                self._sleep(change)
        if batch:
            self._commit_group(batch)
        if change.error is not None:
            raise change.error
        result: T = change.result
        return result

    def close(self) -> None:
        """Let the commits in flight finish (fsync included), then refuse every change still
        waiting or to come.

        The connection is closed right after this; a commit still running on it, or one
        started by a waiting caller, would fail halfway with ZODB's internal errors.
        """
        with self._lock:
            self._closed = True
            while self._busy or self._syncing:
                self._idle.wait()
            for change in self._pending:  # each finds the committer closed
                self._wake(change)

    def _sleep(self, change: _Change) -> None:
        """Let go of the lock until :meth:`_wake` (the lock is held, and held again after)."""
        wake = change.wake = _new_lock()
        wake.acquire()
        self._lock.release()
        try:
            wake.acquire()
        finally:
            self._lock.acquire()
            change.wake = None

    @staticmethod
    def _wake(change: _Change) -> None:
        if change.wake is not None and change.wake.locked():
            change.wake.release()

    def _idle_changed(self) -> None:
        """A group finished committing or syncing (the lock is held): wake who needs it."""
        if self._closed:
            self._idle.notify_all()  # close() waits for the commits in flight
        if not self._busy and self._pending:
            self._wake(self._pending[0])  # it leads the next group

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError("the queue's storage was closed before this change committed")

    def _lead(self) -> list[_Change]:
        """Take the pending changes as the next group (the lock is held)."""
        self._busy = True
        if self._last_batch > 1 and len(self._pending) < self._last_batch:
            self._gathering = True
            self._arrived.wait(GATHER_SECONDS)
            self._gathering = False
        batch, self._pending = self._pending, []
        for change in batch:
            change.taken = True
        self._last_batch = len(batch)
        return batch

    def _commit_group(self, batch: list[_Change]) -> None:
        mark = None
        interrupted: BaseException | None = None
        try:
            mark = self._commit(batch)
        except BaseException as exc:  # KeyboardInterrupt and such: errors are set already
            interrupted = exc
        finally:
            with self._lock:
                self._busy = False  # the next group may commit while this one is fsynced
                self._syncing += 1
                self._idle_changed()
        if mark is not None and self._syncer is not None and interrupted is None:
            try:
                self._syncer.sync_through(mark)
            except BaseException as exc:
                failure = self._describe_failure(exc)
                for change in batch:
                    if change.error is None:
                        change.error = failure
                if not isinstance(exc, Exception):
                    interrupted = exc
        with self._lock:
            for change in batch:
                change.done = True
                self._wake(change)
            self._syncing -= 1
            self._idle_changed()
        if interrupted is not None:
            raise interrupted

    def _commit(self, batch: list[_Change]) -> int | None:
        """Commit the group (retrying conflicts); the sync mark, or None if it failed."""
        try:
            last: ConflictError | None = None
            for attempt in range(MAX_CONFLICT_RETRIES):
                try:
                    mark = self._apply_and_commit(batch)
                    self.commits += 1
                    return mark
                except ConflictError as conflict:
                    last = conflict
                    self._tm.abort()
                    for change in batch:
                        change.error = None
                    # Exponential, capped: over ZEO several processes meet at the queue's head,
                    # and a round trip is milliseconds, so linear steps of 2 ms kept colliding.
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                    log.debug("conflict on commit, retrying (attempt %d)", attempt + 1)
            # The last conflict names the record and its serials (a damaged one: store.py).
            raise ConflictError("ackqueue: gave up after repeated write conflicts") from last
        except BaseException as exc:
            abort_quietly(self._tm)
            if self._hooks is not None:
                self._hooks.aborted()
            failure = self._describe_failure(exc)
            for change in batch:
                if change.error is None:
                    change.error = failure
            if not isinstance(exc, Exception):
                raise
            return None

    def _apply_and_commit(self, batch: list[_Change]) -> int | None:
        hooks, last_commit = self._hooks, self._last_commit
        for tries in itertools.count(1):
            self._tm.begin()
            if hooks is not None:
                hooks.begin()
            seen = last_commit() if last_commit is not None else None
            if self._apply_all(batch):
                break
            # A change failed after editing part of what it edits: those edits are in this
            # transaction. Start again without it (a change can be applied again, as after a
            # conflict), so that it changes nothing and the others commit whole. If another
            # commit came in meanwhile, the failure may be the stale view's (as a conflict
            # would say at the commit): every change gets a try on the new one.
            self._tm.abort()
            if (last_commit is not None and last_commit() != seen
                    and tries < MAX_CONFLICT_RETRIES):
                for change in batch:
                    change.error = None
        if all(change.error is not None for change in batch):
            self._tm.abort()  # nothing left to commit
            return None
        if hooks is not None:
            hooks.before_commit()
        if self._syncer is None:
            self._finish()
            mark = None
        else:
            with self._syncer.deferring_sync():
                self._finish()
            mark = self._syncer.flushed()
        if hooks is not None:
            hooks.committed()
        return mark

    @staticmethod
    def _apply_all(batch: list[_Change]) -> bool:
        """Apply each change not failed yet; False as soon as one fails (its error set)."""
        for change in batch:
            if change.error is not None:
                continue
            try:
                change.result = change.apply()
            except (ConflictError, POSStorageError):  # the storage's fault (a ZEO server away)
                raise
            except Exception as exc:  # the change's own fault: it fails alone
                change.error = exc
                return False
        return True

    def _finish(self) -> None:
        """Commit the transaction; a commit the storage made and then reported failed (see
        :func:`committed_despite`) is a commit: the transaction's cleanup turned what it
        changed into ghosts, read again from the storage, which holds the change."""
        try:
            self._tm.commit()
        except ValueError as exc:
            if not committed_despite(exc):
                raise
            abort_quietly(self._tm)
            log.warning("ackqueue: a commit was made, and then reported failed by the ZEO "
                        "client (ZEO issue 193, %s): taken as made", exc)
