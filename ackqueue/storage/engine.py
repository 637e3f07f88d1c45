"""The contract every storage engine keeps, and the storage URIs that choose one.

An engine is one way of storing a queue database: a FileStorage file of this process
(:mod:`.filestorage`), memory (:mod:`.memory`), a ZEO server (:mod:`.zeo`), PostgreSQL through
RelStorage (:mod:`.postgresql`). Each is an :class:`Engine` that opens its databases, says which
storages are its own, and declares what it supports; :class:`~ackqueue.storage.store.Store`
asks it, never the storage. The store's registry (``ENGINES`` in :mod:`.store`) maps each URI
scheme to its engine; a new scheme is one engine module, one registry line and one entry in
the contract tests (``tests/storage/test_engines.py``).

URIs are spelled as the ``zodburi`` package spells them: ``zeo://``, ``file://``, ``memory://``,
``postgresql://``. ``file://`` is the same as giving the path (and shares its one-opener-per-file
registry); a scheme no engine registers is handed to ``zodburi`` (a requirement, as ZEO is)
by :class:`OtherStorages`, so any storage it knows opens the same way.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import ZODB
from ZODB.broken import Broken, find_global
from ZODB.Connection import Connection
from ZODB.FileStorage import FileStorage
from ZODB.POSException import ConflictError, POSKeyError, ReadOnlyError, StateLoadError
from ZODB.utils import oid_repr, z64

from ackqueue.errors import DamagedFileError, StorageError, UnsafeRecordError, damaged_message
from ackqueue.records import (
    CHECKED_STATES,
    GarbledClassName,
    garbled_class_name,
    restricted_class_factory,
    state_damage,
    unsafe_record,
)
from ackqueue.storage.commit import Syncer
from ackqueue.storage.failures import storage_failed
from ackqueue.storage.items import record_damage

T = TypeVar("T")

OPEN_RETRIES = 5


class Packer(Protocol):
    """Packs a database by itself as it is written (see ``AutoPacker`` in filestorage.py)."""

    def after_commit(self) -> None: ...

    def pack(self) -> None: ...

    def close(self) -> None: ...


class WriteRepair(Protocol):
    """What a failed write (a full disk) left in the storage, cut off before the next commit."""

    needed: bool

    def first(self, change: Callable[[], T]) -> Callable[[], T]: ...


class Engine(ABC):
    """One kind of storage, as the store uses it.

    The class attributes declare what the engine supports; the store relies on them and on the
    methods below only. A method's default is what an engine that does not support it does:
    nothing. ``tests/storage/test_engines.py`` holds every engine to what it declares.
    """

    name: ClassVar[str] = ""
    """What messages and the documentation call it."""

    schemes: ClassVar[tuple[str, ...]] = ()
    """The URI schemes it opens (the store's registry maps them to it)."""

    shared: ClassVar[bool] = False
    """Other processes may write its storages at the same time: queues on it run in shared
    mode unless ``shared=False`` says otherwise."""

    local_fsync: ClassVar[bool] = False
    """This process makes its commits durable, so ``durability=`` is the choice of the store
    that opened it (and a second opener of the same file must make the same choice)."""

    syncs: ClassVar[bool] = False
    """Sync: a commit may leave its fsync to the group committer (:meth:`syncer`)."""

    commit_hooks: ClassVar[bool] = False
    """Commit hooks: one writer process reads its transaction log back, so queue counts are
    kept off each commit (:meth:`counts_in_log`, see counts.py)."""

    packs: ClassVar[bool] = False
    """Packing: it packs itself as it is written (:meth:`packer`); every engine packs on
    request (``ZODB.DB.pack``)."""

    repairs: ClassVar[bool] = False
    """It cuts off what a failed write left before the next commit (:meth:`write_repair`)."""

    drop_notice: ClassVar[bool] = False
    """Dropped-connection notice: its storages reconnect to a server, and are told so
    (:meth:`adopt` makes them forget what they fetched from the server that went away)."""

    @abstractmethod
    def owns(self, storage: Any) -> bool:
        """Whether ``storage`` is one of this engine's (for a caller's database, or a storage
        that ``zodburi`` opened)."""

    @abstractmethod
    def open(self, where: str, durability: str) -> ZODB.DB:
        """The database ``where`` (one of :attr:`schemes`' URIs, or a file path for the
        engines that open files) names, opened for this process."""

    def file(self, storage: Any) -> str | None:
        """The file this process writes ``storage`` to, if it is one (the status file and
        the CLI's live-queue report go beside it)."""
        return None

    def adopt(self, storage: Any) -> None:
        """Prepare ``storage`` (of this engine) for the store, before its first commit."""
        return None  # nothing to do unless the engine says otherwise

    def syncer(self, storage: Any) -> Syncer | None:
        """The storage as a :class:`~ackqueue.storage.commit.Syncer`, if its commits leave
        their fsync to the committer (only where :attr:`syncs`)."""
        return None

    def counts_in_log(self, storage: Any) -> bool:
        """Whether queue counts may be kept in ``storage``'s transaction log (only where
        :attr:`commit_hooks`, and for a writable storage this process owns)."""
        return False

    def packer(
        self,
        db: ZODB.DB,
        record_state: Callable[[tuple[int, int, int]], None],
        state: tuple[int, int, int] | None,
        pack_time: Callable[[], float | None],
    ) -> Packer | None:
        """A packer for ``db``, which this engine opened (only where :attr:`packs`)."""
        return None

    def note_dropped(self, storage: Any, records: int, garbage: int = 0) -> None:
        """``records`` stored objects were just made unreachable, and ``garbage`` bytes of
        inline entries deleted: a hint for packing."""
        return None  # nothing to do unless the engine says otherwise

    def write_repair(self, storage: Any, where: str) -> WriteRepair | None:
        """The repair of ``storage`` after a failed write (only where :attr:`repairs`)."""
        return None

    def closed(self, storage: Any) -> None:
        """``storage``, which this engine opened, was just closed: remove what it left."""
        return None  # nothing to do unless the engine says otherwise

    def disown(self, storage: Any) -> None:
        """In a child made by fork, where ``storage`` is the parent's: make this process's
        copies of its descriptors harmless to the parent, whatever the child does with them."""
        return None  # nothing to do unless the engine says otherwise


class OtherStorages(Engine):
    """Any storage no other engine owns: a scheme ``zodburi`` knows that no engine registers,
    or a caller's database on a storage of its own. It declares nothing."""

    name = "zodburi"

    def owns(self, storage: Any) -> bool:
        return True

    def open(self, where: str, durability: str) -> ZODB.DB:
        return open_through_zodburi(where)


# -- storage URIs ---------------------------------------------------------------------------------


def is_uri(path: Any) -> bool:
    """True for a string that names a storage by URI rather than a file path."""
    return isinstance(path, str) and "://" in path.split("?", 1)[0]


def scheme_of(uri: str) -> str:
    return uri.split("://", 1)[0].lower()


def as_path(path: Any) -> Any:
    """The file path (or storage URI) ``path`` names, as a str: a ``file://`` URI as its path,
    ``~`` expanded as a shell would, bytes (and ``os.PathLike`` of bytes) decoded as ``open()``
    does (``os.fsdecode``); None unchanged. Anything else is a ``TypeError`` saying what to
    give, and an empty path a ``ValueError``."""
    if path is None:
        return None
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(
            f"path must be a file path (str or os.PathLike), a storage URI, or None for a "
            f"queue in memory; not {type(path).__name__} {path!r}"
        )
    path = os.fsdecode(path)
    if not path:
        raise ValueError("path must not be empty: a file path, a storage URI, or None for a "
                         "queue in memory")
    if is_uri(path):
        if not path.startswith("file://"):
            return path
        parts = urlsplit(path)
        if parts.query:
            raise StorageError(
                f"{path}: ackqueue opens file:// storages itself; query options are not supported"
            )
        path = unquote(parts.netloc + parts.path)
    return os.path.expanduser(path)


def shown(uri: str) -> str:
    """``uri`` (of any scheme) with its password, if any, replaced by ``***``: for messages,
    logs and ``repr``, which must never show a password."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def open_through_zodburi(
    uri: str,
    resolved: str | None = None,
    failed: Callable[[BaseException], StorageError] | None = None,
    extra: str = "zeo",
) -> ZODB.DB:
    """Open the database ``uri`` names through ``zodburi`` (``resolved``: ``uri`` as zodburi
    is to read it); ``failed`` makes the error for a storage that did not open, and ``extra``
    names the package extra that installs what it needs."""

    def failure(exc: BaseException) -> StorageError:
        if failed is not None:
            return failed(exc)
        return StorageError(f"cannot open storage {shown(uri)}: {exc!r}")

    try:
        import zodburi
    except ImportError:
        install = ("pip install zodburi relstorage psycopg2-binary, or pip install "
                   "'.[postgresql]' in a checkout of ackqueue" if extra == "postgresql"
                   else "pip install zodburi")
        raise StorageError(
            f"opening {shown(uri)} needs the zodburi package, which ackqueue requires: "
            f"this environment lacks it ({install})"
        ) from None
    read = resolved if resolved is not None else uri
    try:
        factory, dbkw = zodburi.resolve_uri(read)
    except Exception as exc:
        if failed is not None:
            raise failed(exc) from exc
        raise StorageError(f"cannot open storage {shown(uri)}: {exc}") from exc
    # zodburi fills in a count of its own (10,000) where a URI's query names none: the count
    # of a database ackqueue opens applies then. A zconfig file's <zodb> section says its own.
    named = parse_qs(urlsplit(read).query)
    if scheme_of(read) != "zconfig" and "connection_cache_size" not in named:
        dbkw["cache_size"] = SHARED_CACHE_OBJECTS

    def opened() -> Any:
        try:
            return factory()
        except Exception as exc:
            raise failure(exc) from exc

    return db_on(opened, **dbkw)


class _NamingConnection(Connection):
    """Names the record whose state could not be loaded (ZODB raises an empty
    ``StateLoadError`` and only logs which record it was): one the restricted class factory
    refused, or one that reading it back proves damaged."""

    def setstate(self, obj: Any) -> None:
        kind = type(obj)
        try:
            super().setstate(obj)
            if type(obj) in CHECKED_STATES:
                wrong = state_damage(obj)
                if wrong is not None:
                    raise _StateLacks(wrong)
            elif isinstance(obj, Broken) and garbled_class_name(kind.__module__, kind.__name__):
                # A reference naming a class that is not there loads as ZODB's Broken stand-in
                raise _StateLacks("is of a class no module has: the reference to it is damaged")
        except Exception as exc:
            if storage_failed(exc):
                # The server went away during the load (a restart): not damage, and reading
                # the record back now could answer from a server still coming up (CI:
                # test_zeo_scale's restart run took live records for damaged ones).
                raise
            record = f"record {oid_repr(obj._p_oid)} ({kind.__module__}.{kind.__qualname__})"
            unsafe = unsafe_record(exc)
            if unsafe is not None and not isinstance(unsafe, GarbledClassName):
                raise UnsafeRecordError(f"{record}: {unsafe}") from exc
            why = str(exc) if isinstance(exc, _StateLacks) else None
            why = why or (str(unsafe) if unsafe is not None else None)
            why = why or damage_of(self._storage.load, obj._p_oid, self._db.storage)
            why = why or _state_misfits(kind, exc)
            if why is None:
                raise  # the record reads back whole: not damage, the error is the code's
            raise DamagedFileError(damaged_message(self._db.where, f"{record} {why}")) from exc


def _state_misfits(kind: type, exc: BaseException) -> str | None:
    """Why a record that reads back as whole pickles is damaged anyway: the ``__setstate__``
    it was loaded with refused the state (ZODB's StateLoadError from it), and that method is
    one whose code is not ackqueue's (or a caller's) to get wrong: a BTree's or bucket's (an
    entry key of the wrong type, a child of another class), or persistent's for a plain state
    (not a dict)."""
    cause = exc.__cause__
    # BTrees' C __setstate__ parses the state with PyArg_ParseTuple, which raises SystemError
    # ("new style getargs format but argument is not a tuple") for a state of another shape;
    # persistent's takes the items of a dict state (AttributeError for a list); zodbpickle's
    # unpickler refuses an opcode of a later protocol that the inert check (the standard
    # library's) reads, with OverflowError ("character argument not in range").
    refusals = (TypeError, ValueError, SystemError, OverflowError, AttributeError)
    if not isinstance(exc, StateLoadError) or not isinstance(cause, refusals):
        return None
    # The class that defines the __setstate__ used: a subclass of a caller's class that has
    # its own inherits it, and its error may be that code's.
    owner = next(c for c in kind.__mro__ if "__setstate__" in vars(c))
    if owner.__module__.partition(".")[0] not in ("BTrees", "persistent"):
        return None
    return f"has a state its class refuses ({type(cause).__name__}: {cause})"


def stamped_late(storage: Any, oid: bytes) -> str | None:
    """Why a record whose view conflicts ("deleted, likely by simultaneous pack") is damaged:
    its current record reads back stamped with a transaction after the storage's last."""
    try:
        _data, tid = storage.load(oid)
    except Exception as exc:
        if storage_failed(exc) or isinstance(exc, ConflictError):
            return None
        return f"cannot be read back ({type(exc).__name__}: {exc})"
    if tid > storage.lastTransaction():
        return "is stamped with a transaction later than the file's last one"
    return None


class _StateLacks(Exception):
    """A record's state loaded without an attribute every record of its class holds."""


def damage_of(
    load: Callable[[bytes], tuple[bytes, bytes]], oid: bytes, storage: Any = None
) -> str | None:
    """Why the stored record ``oid`` is damaged, if reading it back with ``load`` proves it:
    the storage cannot read it, or its bytes are not the two whole pickles (class, state) that
    ZODB writes, or (a view's conflict, with the database's ``storage``) the storage's current
    record of it is stamped later than its last transaction. None if it reads back whole, or
    the storage could not be reached."""
    try:
        data, _serial = load(oid)
    except POSKeyError:
        return "is not in the file: the record that refers to it is damaged"
    except ConflictError:
        return None if storage is None else stamped_late(storage, oid)
    except Exception as exc:
        if storage_failed(exc):
            return None
        return f"cannot be read back ({type(exc).__name__}: {exc})"
    return record_damage(data)


class _RefusalsRaised(logging.Filter):
    """Drops ZODB's traceback of a record the restricted class factory refused: the
    :class:`~ackqueue.UnsafeRecordError` raised instead says all of it, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or unsafe_record(exc) is None


_refusals_raised = _RefusalsRaised()


class _QueueDB(ZODB.DB):
    klass = _NamingConnection
    where = ""  # what a user knows the database by (the queue file of a private server)


class RecordLoader:
    """The class factory of a database ackqueue opens: restricted (only ackqueue's, BTrees'
    and persistent's classes, :func:`~ackqueue.records.restricted_class_factory`) unless every
    queue open on the database uses pickle.

    A pickle queue's file is code anyway (its items are pickles), and a ``PriorityAckQueue``
    keys its entries by the items themselves, so its tree may name any class of the caller's:
    ZODB's own loading then. Until a queue says which it uses, and whenever one with another
    serializer is open, nothing but ackqueue's records loads. Each connection's reader keeps
    this object, so a change applies to every connection of the database at once.
    """

    def __init__(self) -> None:
        self.restricted = True

    def __call__(self, connection: Any, module: str, name: str) -> Any:
        if self.restricted:
            return restricted_class_factory(connection, module, name)
        return find_global(module, name)


def restricts(db: Any) -> bool:
    """Whether ``db`` loads only ackqueue's records now."""
    factory = getattr(db, "classFactory", None)
    return factory is restricted_class_factory or (
        isinstance(factory, RecordLoader) and factory.restricted
    )


def database_closed(db: ZODB.DB) -> bool:
    """Whether ``db.close()`` was called: ``ZODB.DB.close`` deletes its storage attributes
    (a caller's database, closed under a queue still open on it)."""
    return "_mvcc_storage" not in vars(db)


def new_db(storage: Any, where: str | None = None, **dbkw: Any) -> ZODB.DB:
    """A database on ``storage`` as ackqueue opens every one of its own, loading through a
    :class:`RecordLoader` (whatever ``dbkw`` says: a URI may not choose another class
    factory); a record it refuses is an :class:`~ackqueue.UnsafeRecordError` that says which
    record. ``where``: what errors call it (the queue file of a private server, not its
    socket); the storage's name by default."""
    dbkw["class_factory"] = RecordLoader()
    logging.getLogger("ZODB.Connection").addFilter(_refusals_raised)  # once: a set of filters
    where = where or storage.getName()
    try:
        db = _QueueDB(storage, **dbkw)
        db.where = where
        return db
    except ReadOnlyError:
        raise  # no root record, which a read-only database cannot add: never written to
    except ConflictError as exc:
        # Another process created the root of a new database at the same moment (db_on
        # opens again). Not damage: a client's last transaction may lag the root just
        # committed by the other, which the check below would take for a record from the
        # future (CI: test_processes_opening_at_once_end_up_with_one_server). A file this
        # process reads itself has no other writer to lag: there the root stamped later than
        # the file's last transaction is a damaged transaction header.
        why = stamped_late(storage, z64) if isinstance(storage, FileStorage) else None
        if why is None:
            raise
        raise DamagedFileError(damaged_message(where, f"its root record 0x00 {why}")) from exc
    except Exception as exc:  # it reads the root record (and writes it where none is)
        why = damage_of(storage.load, z64, storage) or stamped_late(storage, z64)
        if why is None:
            raise
        raise DamagedFileError(damaged_message(where, f"its root record 0x00 {why}")) from exc


# Each connection's object cache is bounded by its pickled size, so that big items cannot make
# many objects huge, and by count: ZODB's default, 400 objects, for a file one process opens
# (its ready index is in memory). A database that processes share (db_on) keeps more: there
# each look for the next ready item walks the stored trees from the head, past the entries no
# process may take yet (items put ahead with a delay: their entries, shards and delay-index
# buckets), and once those no longer fit in 400 objects every look, at every commit anywhere,
# loaded them all again (benchmarks/bench_zeo.py --delayed 8000: 77.6 ms of client CPU a get
# and ack of another item, against 4.7 with none delayed; 8.8 with this and ready.py's blocks).
CACHE_BYTES = 32 * 1024 * 1024
SHARED_CACHE_OBJECTS = 20_000


def db_on(open_storage: Callable[[], Any], **dbkw: Any) -> ZODB.DB:
    """A database on the storage ``open_storage()`` returns, opened again if another process
    created the root of a new database at the same moment. Its records load through
    :func:`~ackqueue.records.restricted_class_factory`; its connections cache
    :data:`SHARED_CACHE_OBJECTS` objects of at most :data:`CACHE_BYTES` in all, unless
    ``dbkw`` (a URI's query) says otherwise."""
    dbkw.setdefault("cache_size", SHARED_CACHE_OBJECTS)
    dbkw.setdefault("cache_size_bytes", CACHE_BYTES)
    for attempt in range(OPEN_RETRIES):
        storage = open_storage()
        try:
            return new_db(storage, **dbkw)
        except ConflictError:
            storage.close()
            if attempt == OPEN_RETRIES - 1:
                raise
        except BaseException:
            storage.close()
            raise
    raise AssertionError("unreachable")
