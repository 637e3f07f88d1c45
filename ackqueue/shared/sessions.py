"""Sessions: which processes sharing a queue database (through ZEO) are alive, found by lease.

Each process that opens a shared database registers a session record and renews it on a
background thread, as a ZooKeeper client keeps its session or an etcd client its lease. Every
live process also reaps: a session not renewed for its lease is deleted, and the holds it had
(see :mod:`ackqueue.shared`) are deleted with it, so those items are ready again in place.

Time is the server's: a renewal is a commit, and the age of a session is measured between the
transaction ids the server stamped, so clocks on different hosts need not agree. After its own
connection was lost, or a renewal of its own came late (it waited while ZEO reconnected), a
process reaps nobody until a whole lease has passed since it came back, so a server restart
does not make every other process look dead.

The same thread applies the releases that cannot commit where they happen (a consumer closed or
its thread ended, an ``ack_timeout`` lease ran out: those run with a queue's mutex held). A
session also starts the :mod:`~ackqueue.watching` thread that wakes blocked gets when another
process commits.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import transaction
from BTrees.OOBTree import OOBTree
from persistent import Persistent
from persistent.TimeStamp import TimeStamp
from ZODB.POSException import ConflictError

from ackqueue.errors import AckQueueError, StorageError, StorageUnreachableError
from ackqueue.records import edge_loaded
from ackqueue.shared.holdmarks import HOLDS_KEY, HoldValue, clear_hold, drop_session_holds
from ackqueue.shared.sweeping import SESSIONS_KEY as SESSIONS_KEY
from ackqueue.shared.sweeping import Sweeper
from ackqueue.shared.watching import Member, Watcher
from ackqueue.storage.failures import abort_quietly, storage_failed

# Imported before this module registers its atexit hook (ending sessions), so that the
# store's (closing storages) runs after ours.
from ackqueue.storage.store import Store

log = logging.getLogger("ackqueue")

RUN_RETRIES = 100
T = TypeVar("T")
RENEWALS_PER_LEASE = 4
# A renewal more than this many renewal intervals after the one before came late: this process
# was cut off or stalled meanwhile (a renewal waits while ZEO reconnects, without failing).
LATE_AFTER_INTERVALS = 2



class SessionRecord(Persistent):
    """A process's session as stored: who it is and how long its lease is."""

    # The queues this session has taken items from within its last lease: the sessions that
    # take from a queue split its keys into stripes between them (ready.py), and one that
    # stopped taking (a long job) must not keep its stripe waiting. Class defaults, so older
    # records load; ``consuming`` True is what versions before 2026-11-27 wrote once a
    # session had taken from any queue of the database (counted as taking from each).
    consuming = False
    consumed: tuple[str, ...] = ()

    def __init__(self, host: str, pid: int, lease: float) -> None:
        self.host = host
        self.pid = pid
        self.lease = lease
        self.renewals = 0
        self.reaped = False

    def takes_from(self, name: str) -> bool:
        """Whether this session has taken items from queue ``name``."""
        return self.consuming is True or name in self.consumed


class SessionLost(AckQueueError):
    """This process's session was reaped (it was stopped or cut off longer than its lease)."""

    def __init__(self, sid: str, lease: float) -> None:
        super().__init__(f"session {sid} was reaped: its lease of {lease}s lapsed")
        self.sid = sid


def server_time(tid: bytes) -> float:
    return float(TimeStamp(tid).timeTime())


def shared_trees(root: Any) -> tuple[Any, Any]:
    """The sessions tree and the per-session holds trees (inside a change), made if missing."""
    if SESSIONS_KEY not in root:
        root[SESSIONS_KEY] = OOBTree()
    if HOLDS_KEY not in root:
        root[HOLDS_KEY] = OOBTree()
    return root[SESSIONS_KEY], root[HOLDS_KEY]


class Session:
    """This process's session on one shared database (one per :class:`Store`)."""

    def __init__(self, store: Store, lease: float) -> None:
        self.store = store
        self.lease = lease
        self.refs = 0
        self.sid = ""
        self.lost = 0  # how many times this process's session was reaped
        self._queues: weakref.WeakSet[Member] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._releases: list[tuple[str, Any, HoldValue]] = []
        self._stopped = False
        self._back_at = 0.0  # server time of the first renewal after a lost connection
        self._renewed_at = 0.0  # server time of this session's last renewal
        # This process's monotonic time of the last renewal, and of the last time it found its
        # session reaped or renewed it after a gap past its lease: what may_be_void measures a
        # hold against.
        self._renewed_mono = time.monotonic()
        self._lost_mono = float("-inf")
        self._took: dict[str, float] = {}  # queue name -> monotonic time of the last take
        self._failing = False
        self._restart_lock = threading.Lock()
        # Renewals, reaping and releases commit on a connection of their own, so that a lease
        # is renewed on time even while the queue's writer is busy retrying conflicts.
        self._run_lock = threading.Lock()
        self._tm = transaction.TransactionManager()
        self._conn = store.db.open(transaction_manager=self._tm)
        self._register()
        # First of the threads: its connection opens here and may fail (the server gone), and
        # then no thread of this session is left running.
        self._sweeper = Sweeper(store.db, self)
        self._thread = threading.Thread(
            target=self._keep_alive, name="ackqueue-session", daemon=True
        )
        self._thread.start()
        self._watcher = Watcher(store, self._queues)

    # -- the session record -------------------------------------------------------------

    def _run(self, change: Callable[[], T]) -> T:
        """Commit ``change`` on the session's own connection, retrying conflicts."""
        self.store.check_own()  # (a parent's session, in a child made by fork: refused)
        with self._run_lock:
            for attempt in range(RUN_RETRIES):
                try:
                    self._tm.begin()
                    result = change()
                    self._tm.commit()
                    return result
                except ConflictError:
                    self._tm.abort()
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                except BaseException:
                    abort_quietly(self._tm)
                    raise
            raise StorageError(f"{self.store.where}: session commits kept conflicting")

    def _root(self) -> Any:
        return self._conn.root()

    def _register(self) -> None:
        sid = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        root, lease = self._root, self.lease

        def register() -> SessionRecord:
            sessions, _ = shared_trees(root())
            record = sessions[sid] = SessionRecord(socket.gethostname(), os.getpid(), lease)
            return record

        record = self._run(register)
        self.sid = sid
        self._back_at = self._renewed_at = server_time(record._p_serial)
        self._renewed_mono = time.monotonic()

    def check_live(self, consuming: str | None = None) -> str:
        """Inside a change: this session's id, or :class:`SessionLost` if it was reaped;
        ``consuming``: the name of a queue it takes items from, marked once."""
        sessions, _ = shared_trees(self.store.root())
        record = sessions.get(self.sid)
        if record is None or record.reaped:
            raise SessionLost(self.sid, self.lease)
        if consuming is not None:
            self._took[consuming] = time.monotonic()
            if consuming not in record.consumed:
                record.consumed = (*record.consumed, consuming)
        return self.sid

    def renew(self) -> float:
        """Renew this session's lease; return the server's time of the renewal.

        That time, stamped on the commit, is what the reaper measures lapses against: the
        storage's lastTransaction() is no clock, as RelStorage moves it only when it polls.
        """
        sid = self.sid
        since = time.monotonic() - self.lease
        recent = {name for name, at in list(self._took.items()) if at >= since}

        def renew() -> SessionRecord:
            sessions, _ = shared_trees(self._root())
            record: SessionRecord | None = sessions.get(sid)
            if record is None or record.reaped:
                raise SessionLost(sid, self.lease)
            record.renewals += 1
            kept = tuple(name for name in record.consumed if name in recent)
            if kept != record.consumed:
                record.consumed = kept  # no take within a lease: out of those stripes
            return record

        renewed = server_time(self._run(renew)._p_serial)
        now = time.monotonic()
        if now - self._renewed_mono > self.lease:
            # A gap past the lease (this process stopped or cut off): the session may have
            # been reaped even though this renewal got through (over ZEO it can, before the
            # reap's invalidation arrives); every hold taken before now is in doubt.
            self._lost_mono = max(self._lost_mono, now)
        self._renewed_mono = now
        return renewed

    def may_be_void(self, taken_at: float) -> bool:
        """Whether a hold taken at ``taken_at`` (``time.monotonic()``) may have been reaped and
        its item given to another process: this session was found reaped, or went a whole
        lease without a renewal, since; or it has not been renewed for a whole lease now (this
        process was stopped or cut off and the session thread has not looked yet)."""
        now = time.monotonic()
        return taken_at <= self._lost_mono or now - self._renewed_mono > self.lease

    def confirm(self) -> None:
        """Renew this session now, or take a new one if it was reaped: after a gap past the
        lease, holds taken before now are void (``may_be_void``), later ones are sound."""
        try:
            self.renew()
        except SessionLost as lost:
            self.start_over(lost.sid)
        except StorageError:
            raise
        except Exception as exc:
            cls = StorageUnreachableError if storage_failed(exc) else StorageError
            raise cls(f"{self.store.where}: cannot renew this process's session: {exc!r}") from exc

    def reap(self, now: float) -> list[str]:
        """End the sessions not renewed for their lease at server time ``now`` and delete
        their holds; return their ids."""
        back_at, mine = self._back_at, self.sid

        def reap() -> list[str]:
            root = self._root()
            sessions, holds_by_session = shared_trees(root)
            dead = []
            for sid, record in list(edge_loaded(sessions).items()):
                if sid == mine:
                    continue
                record._p_activate()
                renewed = max(server_time(record._p_serial), back_at)
                if renewed + record.lease < now:
                    dead.append(sid)
            for sid in dead:
                sessions[sid].reaped = True  # conflicts with a renewal racing this reap
                del sessions[sid]
            for sid in [sid for sid in edge_loaded(holds_by_session) if sid not in sessions]:
                drop_session_holds(root, sid)
            return dead

        dead: list[str] = self._run(reap)
        for sid in dead:
            log.warning("ackqueue: session %s lapsed; its held items are ready again", sid)
        return dead

    def end(self) -> None:
        """Delete this session and every hold it still has (a clean exit)."""
        sid = self.sid

        def end() -> None:
            root = self._root()
            sessions, _ = shared_trees(root)
            if sid in sessions:
                del sessions[sid]
            drop_session_holds(root, sid)

        self._run(end)

    # -- queues using this session --------------------------------------------------------

    def add_queue(self, queue: Member) -> None:
        self._queues.add(queue)

    def remove_queue(self, queue: Member) -> bool:
        """Stop serving ``queue``; whether no other queue of this session has its name."""
        self._queues.discard(queue)
        return all(other.name != queue.name for other in list(self._queues))

    def took_from(self, name: str) -> bool:
        """Whether this session took items from queue ``name`` (and so may be marked a taker)."""
        return name in self._took

    def stop_taking_from(self, name: str) -> Callable[[], None]:
        """The edit unmarking this session as one that takes from queue ``name`` (see
        :meth:`check_live`): other processes then leave it out of that queue's stripes."""
        sid, root = self.sid, self.store.root

        def unmark() -> None:
            record = root().get(SESSIONS_KEY, {}).get(sid)
            if record is not None and name in record.consumed:
                record.consumed = tuple(n for n in record.consumed if n != name)

        return unmark

    def release_later(self, name: str, key: Any, value: HoldValue) -> None:
        """Delete hold ``key`` of queue ``name`` soon, if it is still ``value`` (fenced)."""
        with self._cond:
            self._releases.append((name, key, value))
            self._cond.notify()

    def apply_releases(self) -> None:
        """Commit the releases asked for so far (the session thread does so soon anyway)."""
        with self._cond:
            batch, self._releases = self._releases, []
        if not batch:
            return
        root = self._root

        def release() -> None:
            shared_trees(root())
            for name, key, value in batch:
                clear_hold(root(), name, key, value)

        try:
            self._run(release)
        except Exception:
            with self._cond:
                self._releases[:0] = batch  # try again on the next round
            raise

    # -- the background threads -------------------------------------------------------------

    def _keep_alive(self) -> None:
        interval = self.lease / RENEWALS_PER_LEASE
        next_renewal = time.monotonic() + interval
        while True:
            with self._cond:
                while not self._stopped and not self._releases:
                    timeout = next_renewal - time.monotonic()
                    if timeout <= 0:
                        break
                    self._cond.wait(timeout)
                if self._stopped:
                    return
            try:
                if time.monotonic() >= next_renewal:  # first: a release must not delay it
                    next_renewal = time.monotonic() + interval
                    self._beat()
                self.apply_releases()
            except SessionLost as lost:
                self.start_over(lost.sid)
            except Exception as exc:  # the server is away (ZEO reconnects by itself), or a bug
                if not self._failing:
                    log.warning("ackqueue: cannot renew session %s: %s", self.sid, exc)
                self._failing = True
                next_renewal = time.monotonic() + min(interval, 0.5)

    def _beat(self) -> None:
        now = self.renew()
        late = now - self._renewed_at > LATE_AFTER_INTERVALS * self.lease / RENEWALS_PER_LEASE
        self._renewed_at = now
        if self._failing or late:
            # We saw nothing of the others meanwhile, and they were likely cut off as long as
            # we were (a server restart): reaping waits a whole lease from now.
            self._back_at = now
        if self._failing:
            self._failing = False
            log.warning("ackqueue: session %s renewed again", self.sid)
        self.reap(now)

    def start_over(self, lost_sid: str) -> None:
        """Our session was reaped: what we held is someone else's now. Take a new one."""
        with self._restart_lock:
            if self.sid == lost_sid:
                self._start_over()

    def _start_over(self) -> None:
        log.warning(
            "ackqueue: session %s was reaped (this process was stopped or cut off longer than "
            "its %ss lease); its held items were given to others and acking them will fail",
            self.sid,
            self.lease,
        )
        self.lost += 1
        self._lost_mono = time.monotonic()
        with self._cond:
            self._releases.clear()
        for queue in list(self._queues):
            queue.session_lost()
        self._register()

    def close(self) -> None:
        with self._run_lock:
            abort_quietly(self._tm)
            self._conn.close()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._watcher.stop()
        self._sweeper.stop()


_lock = threading.Lock()
_sessions: dict[int, Session] = {}


def acquire(store: Store, lease: float) -> Session:
    """This process's session on ``store``'s database, started with the first shared queue."""
    with _lock:
        session = _sessions.get(id(store))
        if session is None or session.store is not store:
            session = _sessions[id(store)] = Session(store, lease)
        elif lease != session.lease:
            raise StorageError(
                f"queues of {store.where} in one process share one session; it has a lease of "
                f"{session.lease}s, not {lease}s"
            )
        session.refs += 1
        return session


def release(session: Session) -> None:
    """Drop one queue's use of ``session``; the last one ends it (its holds are given back)."""
    with _lock:
        session.refs -= 1
        if session.refs > 0:
            return
        _sessions.pop(id(session.store), None)
    session.stop()
    try:
        session.end()
    except Exception as exc:  # it will be reaped when its lease lapses
        log.warning("ackqueue: could not end session %s: %s", session.sid, exc)
    finally:
        session.close()


def _end_all_at_exit() -> None:
    with _lock:
        sessions = list(_sessions.values())
        _sessions.clear()
    for session in sessions:
        session.stop()
        with contextlib.suppress(Exception):  # best effort; the lease covers it
            session.end()
        with contextlib.suppress(Exception):
            session.close()


atexit.register(_end_all_at_exit)


def _after_fork() -> None:
    """In a child just made by fork: the sessions are the parent's (their renewing threads
    stayed there); ending them at this process's exit would end the parent's leases under it,
    and its holds would go to other processes while it works on them."""
    global _lock
    _lock = threading.Lock()
    _sessions.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
