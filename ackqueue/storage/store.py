"""The ZODB plumbing: opening a storage, sharing one database per file, connections, commit.

FileStorage allows one opener per file, so every queue on the same file in a process shares
one :class:`Store`, counted by reference and closed with its last queue. A store owns the one
writer connection of its database; all writes go through its :class:`GroupCommitter`.

Which engine opens a path or URI is the registry's choice (:data:`ENGINES`, by URI scheme);
what the store does differently on one engine than on another is what that engine declares
(:class:`~ackqueue.storage.engine.Engine`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import transaction
import ZODB
from ZODB.Connection import Connection
from ZODB.POSException import ConflictError
from ZODB.utils import oid_repr

from ackqueue.base.interrupts import Shield
from ackqueue.errors import (
    DamagedFileError,
    StorageError,
    StorageUnreachableError,
    damaged_message,
)
from ackqueue.records import ROOT_KEY, attach_entry_log, detach_entry_log, queues_of
from ackqueue.storage import counts as counting
from ackqueue.storage.commit import GroupCommitter, WriterTransactions
from ackqueue.storage.engine import (
    Engine,
    OtherStorages,
    Packer,
    RecordLoader,
    as_path,
    database_closed,
    is_uri,
    scheme_of,
    shown,
)
from ackqueue.storage.failures import abort_quietly, storage_failed
from ackqueue.storage.filestorage import FILE, PACK_STATE_KEY, check_durability
from ackqueue.storage.memory import MEMORY
from ackqueue.storage.postgresql import POSTGRESQL
from ackqueue.storage.zeo import ZEO

log = logging.getLogger("ackqueue")

T = TypeVar("T")

# The engines, each opening the URIs of its schemes (engine.py). A new scheme: one line here.
ENGINES: tuple[Engine, ...] = (FILE, MEMORY, ZEO, POSTGRESQL)
OTHER = OtherStorages()  # a scheme none registers, or a storage none owns: through zodburi
_by_scheme = {scheme: engine for engine in ENGINES for scheme in engine.schemes}

# ZODB warns (20 lines, about blobs) when a record passes its large_record_size, 16 MB by
# default. A queue's items are the user's: one of 50 MB is what they chose to put, and
# nothing in the warning is theirs to act on. Each item is its own record, so a big one
# costs one big write and slows nothing else.
LARGE_RECORD_SIZE = 1 << 62

_registry_lock = threading.Lock()
_by_path: dict[str, Store] = {}
_by_db: dict[int, Store] = {}


def engine_for(uri: str) -> Engine:
    """The engine that opens ``uri``."""
    return _by_scheme.get(scheme_of(uri), OTHER)


def engine_of(storage: Any) -> Engine:
    """The engine whose storage ``storage`` is (a caller's, or one zodburi opened)."""
    return next((engine for engine in ENGINES if engine.owns(storage)), OTHER)


def open_db(uri: str) -> ZODB.DB:
    """Open the database ``uri`` names, with the engine its scheme chooses."""
    return engine_for(uri).open(uri, "strict")


def is_shared_storage(storage: Any) -> bool:
    """Whether other processes may write this storage at the same time as this one."""
    return engine_of(storage).shared


def _opener(path: str | None, shared: bool | None) -> tuple[Engine, str | None]:
    """The engine that opens ``path`` (a file path or URI, with ``shared=``), and the key its
    store is registered under (None: a store of its own)."""
    if path is None:
        return MEMORY, None
    if is_uri(path):  # one database per URI, as per file
        return engine_for(path), path
    return (ZEO if shared else FILE), os.path.realpath(path)


class Store:
    """One database as ackqueue uses it: a writer connection with group commit."""

    def __init__(
        self, db: ZODB.DB, owns_db: bool, where: str, durability: str = "strict"
    ) -> None:
        self.db = db
        self.where = where
        self.owns_db = owns_db
        self.durability = durability
        self.packer: Packer | None = None
        # True in a child made by fork: the parent's store, which the child must not touch
        # (its file descriptors share their offsets with the parent's; see _after_fork).
        self.inherited = False
        self.opened_in = os.getpid()
        self._refs = 0
        self._names: dict[str, Callable[[], object | None]] = {}
        self._pickles: dict[str, bool] = {}  # open queue name -> whether it uses pickle
        # Explicit: every use of the writer begins its transaction (the group committer, the
        # reads below). An implicit manager would also move the connection to the latest
        # commit after each commit (Connection.afterCompletion), which the next begin does
        # again: that second poll of invalidations was a few us of every put and ack.
        self._tm = WriterTransactions()
        if owns_db:
            db.large_record_size = LARGE_RECORD_SIZE  # every connection, sessions' included
        self.writer: Connection = db.open(transaction_manager=self._tm)
        self._tm.writer = self.writer
        self.writer.large_record_size = LARGE_RECORD_SIZE  # a caller's database: ours only
        storage = db.storage
        self.engine = engine_of(storage)
        self.engine.adopt(storage)
        # One writer process per file: queue counts can be kept off each commit (counts.py).
        self.counts: counting.LogCounts | None = None
        if owns_db and self.engine.counts_in_log(storage):
            self.counts = counting.LogCounts(storage, self.writer, self._tm)
            counting.attach(self.writer, self.counts)
            attach_entry_log(self.writer, self.counts)
            attach_entry_log(db, self.counts.reading)  # the readers' connections
        self._committer = GroupCommitter(
            self._tm, self._describe_failure, self.engine.syncer(storage), hooks=self.counts,
            last_commit=self.db.lastTransaction,
        )
        self._repair = self.engine.write_repair(storage, where)
        self.file_path: str | None = self.engine.file(storage)
        if self.counts is not None:
            self._settle_counts()

    # -- opening and closing ------------------------------------------------------------

    @classmethod
    def acquire(
        cls,
        path: str | os.PathLike[str] | None,
        db: ZODB.DB | None,
        durability: str = "strict",
        autopack: bool = True,
        shared: bool | None = None,
    ) -> Store:
        """The store for a file path or storage URI, a caller's database, or (both None) a new
        in-memory one.

        ``durability`` and ``autopack`` apply to a file path only (see ``filestorage.py``); a
        caller's database or a URI's storage is used as it is. A path with ``shared=True`` is
        served to every process that opens it so (``zeo.py``).
        """
        check_durability(durability)
        with _registry_lock:
            if db is not None:
                store = _by_db.get(id(db))
                if store is None:
                    store = _by_db[id(db)] = cls(db, owns_db=False, where=repr(db))
            else:
                engine, key = _opener(as_path(path), shared)
                store = _by_path.get(key) if key is not None else None
                if store is None:
                    store = cls._opened(engine, key, durability, autopack)
                    if key is not None:
                        _by_path[key] = store
                elif engine.local_fsync and store.durability != durability:
                    raise StorageError(
                        f"queue file {key} is already open in this process with "
                        f"durability={store.durability!r}, not {durability!r}"
                    )
            store._refs += 1
            return store

    @classmethod
    def _opened(cls, engine: Engine, key: str | None, durability: str, autopack: bool) -> Store:
        """A new store on the database ``engine`` opens for ``key`` (None: a new in-memory
        database, shared with nobody)."""
        if key is None:
            return cls(MEMORY.new(), owns_db=True, where="memory")
        where = shown(key) if is_uri(key) else key
        store = cls(engine.open(key, durability), owns_db=True, where=where, durability=durability)
        if autopack and engine.packs:
            store._start_autopack()
        return store

    def claim_name(self, name: str, owner: object) -> object:
        """Reserve ``name`` for ``owner``, one open queue per name and database; return the
        claim, which :meth:`release_dropped` takes.

        A claim whose owner was garbage-collected without ``close()`` (as ``queue.Queue`` code
        never closes) is taken over, with the store reference that owner left behind.
        """
        claim = self._try_claim(name, owner)
        if claim is not None:
            return claim
        gc.collect()  # a dropped queue in a reference cycle is freed only by the collector
        claim = self._try_claim(name, owner)
        if claim is None:
            raise StorageError(
                f"queue {name!r} in {self.where} is already open in this process; "
                "share that AckQueue object between threads instead"
            )
        return claim

    def _try_claim(self, name: str, owner: object) -> object | None:
        with _registry_lock:
            holder = self._names.get(name)
            if holder is not None:
                if holder() is not None:
                    return None
                self._refs -= 1  # the reference its dropped owner has not released yet
            claim = weakref.ref(owner)
            self._names[name] = claim
            return claim

    def registry_free(self) -> bool:
        """Whether no thread holds the registry lock right now (without waiting for it)."""
        if not _registry_lock.acquire(blocking=False):
            return False
        _registry_lock.release()
        return True

    def release_dropped(self, name: str, claim: object) -> None:
        """Release the reference of a queue collected without ``close()`` (see dropping.py),
        unless a new queue took its name over (and with it that reference) meanwhile."""
        with _registry_lock:
            if self._names.get(name) is not claim or not self._release_locked(name):
                return
        self._close()

    def release(self, name: str | None = None) -> None:
        if name is not None:
            self._stop_counting(name)
        with _registry_lock:
            if not self._release_locked(name):
                return
        self._close()

    def serializing(self, name: str, pickles: bool) -> None:
        """Queue ``name`` (claimed) uses pickle or not: the database loads only ackqueue's
        records unless every open queue uses pickle (see :class:`RecordLoader`)."""
        with _registry_lock:
            self._pickles[name] = pickles
            self._update_loader_locked()

    def _update_loader_locked(self) -> None:
        loader = self.db.classFactory  # a caller's database keeps its own
        if isinstance(loader, RecordLoader):
            loader.restricted = not self._pickles or not all(self._pickles.values())

    def _release_locked(self, name: str | None) -> bool:
        """Drop one reference (and ``name``'s claim); True if it was the last one."""
        if name is not None:
            self._names.pop(name, None)
            self._pickles.pop(name, None)
            self._update_loader_locked()
        self._refs -= 1
        if self._refs > 0:
            return False
        for path_key in [k for k, v in _by_path.items() if v is self]:
            del _by_path[path_key]
        for db_key in [k for k, v in _by_db.items() if v is self]:
            del _by_db[db_key]
        return True

    def _start_autopack(self) -> None:
        self._tm.begin()
        try:
            state = self.writer.root().get(PACK_STATE_KEY)
        finally:
            self._tm.abort()
        self.packer = self.engine.packer(self.db, self._record_pack_state, state, self._pack_time)

    # -- deferred counts (see counts.py) -------------------------------------------------

    def _settle_counts(self) -> None:
        """Fold the counts a process that died left deferred, for every queue of the file (a
        pack would drop the transactions that record them), and check the others' against
        the count their last fold recorded (see counts.py)."""
        storage = self.db.storage

        def settle_all() -> None:
            queues = queues_of(self.root(), create=False)
            for record in queues.values() if queues is not None else ():
                counting.settle(record, storage)

        self._tm.begin()
        try:
            queues = queues_of(self.writer.root(), create=False)
        finally:
            self._tm.abort()
        if queues is not None:
            self._committer.run(settle_all)

    def _stop_counting(self, name: str | None) -> None:
        """Fold the deferred count of queue ``name`` (every queue: None) into its Length."""
        counts = self.counts
        if counts is None:
            return

        def stop() -> None:
            queues = queues_of(self.root(), create=False)
            for key in [name] if name is not None else list(queues or ()):
                record = queues.get(key) if queues is not None else None
                if record is not None and counts.defers(record):
                    counts.stop(record)
                elif record is not None:
                    counts.forget(record)  # never changed: nothing to fold

        try:
            self._committer.run(stop)
        except Exception:  # the next opener folds it from the transaction log
            log.warning("could not write the count of queue %r at close", name, exc_info=True)

    def _pack_time(self) -> float | None:
        """Fold the deferred counts; pack up to that fold only (see counts.py)."""
        if self.counts is None:
            return None
        return self.counts.fold_for_pack(self._committer.run)

    def _record_pack_state(self, state: tuple[int, int, int]) -> None:
        def record() -> None:
            root = self.root()
            if ROOT_KEY in root:  # only in a queue file, never as its first content
                root[PACK_STATE_KEY] = state

        self._committer.run(record)

    def _close(self) -> None:
        if self.inherited:
            return  # the parent's files, index and packer: nothing of them is this process's
        try:
            if self.packer is not None:
                self.packer.close()  # records the garbage estimate: before the committer closes
            self._stop_counting(None)
        finally:
            self._committer.close()
        try:
            abort_quietly(self._tm)
            self.writer.close()
        finally:
            counting.detach(self.writer)
            detach_entry_log(self.writer)
            detach_entry_log(self.db)
            if self.owns_db:
                try:
                    storage = self.db.storage  # the closed database lets go of it
                    self.db.close()
                    self.engine.closed(storage)
                except OSError as exc:
                    # Everything committed is already on disk; only the index or the
                    # temporary file could not be written out (a full disk, say).
                    raise StorageError(
                        f"closing queue storage {self.where}: {exc} (committed data is safe; "
                        "the next open rebuilds the index)"
                    ) from exc

    # -- connections and commits ----------------------------------------------------------

    def open_reader(self) -> tuple[Connection, transaction.TransactionManager]:
        """A connection of its own for reading, with its own transaction manager."""
        self.check_own()
        tm = transaction.TransactionManager()
        return self.db.open(transaction_manager=tm), tm

    @property
    def commits(self) -> int:
        """How many commits this store has made: readers sync when it moves."""
        return self._committer.commits

    def run(self, change: Callable[[], T]) -> T:
        """Apply ``change`` to the writer connection's objects and commit it durably."""
        if self.inherited:
            self.check_own()
        if self._repair is not None and self._repair.needed:
            change = self._repair.first(change)
        # Ctrl-C inside a ZODB commit makes FileStorage close itself: hold it back.
        with Shield(interruptible=False):
            result = self._committer.run(change)
        if self.packer is not None:
            self.packer.after_commit()
        return result

    def check_own(self) -> None:
        """Raise :class:`StorageError` if this is a parent's store, in a child made by fork."""
        if self.inherited:
            raise StorageError(
                f"queue storage {self.where} was opened in process {self.opened_in}, before the "
                "fork that made this process: open the queue again here"
            )

    def note_dropped(self, records: int, garbage: int = 0) -> None:
        """``records`` stored objects were just made unreachable, and ``garbage`` bytes of
        inline entries deleted from their buckets: a hint for automatic packing. Call it only
        inside a change (the committer's thread)."""
        self.engine.note_dropped(self.db.storage, records, garbage)

    def root(self) -> Any:
        """The writer connection's root; touch it only inside a change."""
        return self.writer.root()

    def pack(self) -> None:
        try:
            # Ctrl-C between FileStorage's two renames would leave no file and a closed
            # storage: let it wait until the pack is over.
            with Shield(interruptible=False):
                if self.packer is not None:
                    self.packer.pack()
                else:
                    self.db.pack(self._pack_time())
        except OSError as exc:
            raise StorageError(f"cannot pack queue storage {self.where}: {exc}") from exc

    def _describe_failure(self, exc: BaseException) -> BaseException:
        if isinstance(exc, StorageError):
            return exc
        if not self.owns_db and database_closed(self.db):
            # What fails next is ZODB's AttributeError on the storage DB.close deleted.
            err: BaseException = StorageError(
                f"queue storage {self.where} was closed (db.close()) while a queue on it was "
                "open: close the queue before its database"
            )
            err.__cause__ = exc
            return err
        damage = self._conflict_damage(exc)
        if damage is not None:
            err = DamagedFileError(damaged_message(self.where, damage))
            err.__cause__ = exc
            return err
        if isinstance(exc, OSError):
            if self._repair is not None:
                self._repair.needed = True
            err = StorageError(f"cannot write to queue storage {self.where}: {exc}")
        elif storage_failed(exc):
            err = StorageUnreachableError(
                f"commit to queue storage {self.where} failed: {exc!r}"
            )
        elif isinstance(exc, Exception):
            err = StorageError(f"commit to queue storage {self.where} failed: {exc!r}")
        else:
            err = StorageError(f"commit to queue storage {self.where} was interrupted ({exc!r})")
        err.__cause__ = exc
        return err

    def _conflict_damage(self, exc: BaseException) -> str | None:
        """Why the file is damaged, if the commit gave up on conflicts that no other writer
        made: the record's stored revision is stamped later than the file's last transaction
        (with one writer, a later one cannot be another's commit not seen yet)."""
        conflict = exc.__cause__ if isinstance(exc, ConflictError) else None
        if not isinstance(conflict, ConflictError) or self.engine.shared:
            return None
        oid, serials = conflict.oid, conflict.serials
        if oid is None or not serials or not serials[0]:
            return None
        if serials[0] <= self.db.storage.lastTransaction():
            return None
        return (
            f"record {oid_repr(oid)} is stamped with a transaction later than the file's last "
            "one, so every write of it conflicts"
        )


def _close_all_at_exit() -> None:
    """Close file storages on exit so their index is written and the next open is fast."""
    with _registry_lock:
        stores = set(_by_path.values())
        _by_path.clear()
    for store in stores:
        try:
            store._close()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            log.exception("closing %s at exit failed", store.where)


atexit.register(_close_all_at_exit)


def _after_fork() -> None:
    """In a child just made by fork: the stores are the parent's. Their files are open on
    descriptors that share their offsets with the parent's, so a read, a commit, or the index
    written at close here (at this process's exit, say) would land in the parent's file under
    it. Each is marked inherited (it refuses every use) and forgotten: opening a queue here
    makes a store of this process's own. The registry lock may have been held at the fork."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for store in {*_by_path.values(), *_by_db.values()}:
        store.inherited = True
        with contextlib.suppress(Exception):  # (best effort: the child may go on regardless)
            store.engine.disown(store.db.storage)
    _by_path.clear()
    _by_db.clear()


if os.name == "posix":  # (os.register_at_fork: every POSIX Python this supports)
    os.register_at_fork(after_in_child=_after_fork)
