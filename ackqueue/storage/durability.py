"""How durable a commit is when ``put``/``ack`` return: ``"strict"`` or ``"relaxed"``.

``"strict"`` (the default): each commit is written and fsynced before ``put``/``ack`` return,
so it survives ``kill -9`` and power loss. (The fsync runs once FileStorage's commit lock is
free, so that the next group commit is written meanwhile; see :class:`QueueFileStorage`.)

``"relaxed"`` (:class:`RelaxedFileStorage`): each commit is handed to the operating system
before ``put``/``ack`` return, so it survives ``kill -9`` of the process (the kernel holds the
data), and a background thread fsyncs the file every ``sync_interval`` seconds and on close.
A power loss or kernel crash may lose the commits of the last interval. FileStorage cuts a
torn last transaction when it opens; on ext4 in its default ``data=ordered`` mode appended
data reaches the disk before the file size that covers it, so the file ends at a transaction
boundary. On a file system without that ordering a power loss could leave a damaged tail,
which ZODB's ``fsrecover`` repairs. This is SQLite's ``synchronous=NORMAL`` in WAL mode or
Redis's ``appendfsync everysec``.

Both rest on FileStorage's ``_finish_finish`` method, which ZODB keeps separate so that it can
be replaced ("to allow tests to replace it"), and on its documented ``packer`` hook. ZODB's
module globals stay untouched: other FileStorages in the process keep their own fsync.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.format import DATA_HDR_LEN, DataHeader
from ZODB.POSException import POSKeyError
from ZODB.utils import z64

log = logging.getLogger("ackqueue")

DURABILITIES = ("strict", "relaxed")
DEFAULT_SYNC_INTERVAL = 1.0

# Data record headers of recent commits kept in memory (see QueueFileStorage.store).
HEADER_CACHE = 4096


def check_durability(durability: str) -> str:
    if durability not in DURABILITIES:
        raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
    return durability


def fsync_path(path: str) -> None:
    """Fsync a file or directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_packer(storage: Any, referencesf: Any, stop: Any, gc: Any) -> Any:
    """FileStorage's own packer, then an fsync of the packed copy before it replaces the file.

    FileStorage renames the data file to ``.old`` and the ``.pack`` copy into its place right
    after the packer returns, and does not fsync the copy; a power loss soon after would find
    a file whose contents never reached the disk. ``packer`` is FileStorage's documented hook.
    """
    result = FileStorage.packer(storage, referencesf, stop, gc)
    if result is not None:
        copy = storage.getName() + ".pack"
        try:
            fsync_path(copy)
        except BaseException as exc:
            # The packer returns holding the commit lock, and FileStorage.pack releases it
            # only once the packer has returned: failing here would leave every later commit
            # and close() waiting for ever. The file stays as it was; the copy goes.
            storage._commit_lock.release()
            with contextlib.suppress(OSError):
                os.remove(copy)
            log.error("packing %s failed: its packed copy could not be synced (%s); the "
                      "file is unchanged", storage.getName(), exc)
            raise
    return result


class QueueFileStorage(FileStorage):
    """The FileStorage ackqueue opens: FileStorage with its fsync outside the commit lock, an
    index checkpoint, a garbage count and a packer that fsyncs its copy.

    *Fsync after the lock.* FileStorage fsyncs each commit inside ``tpc_finish``, holding the
    storage's commit lock, so nothing else can be committed meanwhile. ackqueue's group
    committer instead asks for the fsync (:meth:`sync_through`) once the commit lock is free:
    the next group's commit is written while this one is being fsynced, and callers still
    return only once their commit is on disk. One fsync covers everything flushed before it,
    so callers whose commit an fsync in flight already covers do not fsync again. Any other
    commit (one not made inside :meth:`deferring_sync`) is fsynced inline, as FileStorage does.

    *Index checkpoints.* FileStorage writes its ``.index`` file only on close and pack; after
    ``kill -9`` it finds the objects written since by scanning the file (~30 MB/s here).
    :meth:`save_index` bounds that scan; it takes ~25 ms for a million objects.

    The commit steps below are FileStorage's ``_finish_finish``, which ZODB keeps as a separate
    method so that it can be replaced; only where the fsync happens differs.

    *Header cache.* Storing a new revision of an object, FileStorage seeks to the current
    revision's record and reads its header, only to compare its transaction id with the one
    the writer loaded (the conflict check). The queue rewrites the same few objects (the
    tree's head and tail buckets, the counter) commit after commit, so that seek and read of
    the file (a tenth of an ack's CPU) is nearly always of a record this storage wrote moments
    before. The headers of the last commits' records are kept, by file position, and handed
    to the conflict check of :meth:`store` only (every other read goes to the file, and the
    check itself is unchanged); records never move except in a pack, which opens a new file.
    """

    replaced_bytes = 0
    """Bytes of the file that became garbage (what a pack reclaims) since the count was reset:
    object revisions stored over an older revision, and records whose object was dropped
    (see :meth:`note_dropped`)."""

    _new_bytes = 0  # bytes of records of objects stored for the first time, and their count:
    _new_records = 0  # their average is the size of a typical dropped record (a queue entry)

    sync_each_commit = True  # False: only sync_through() and close() fsync (relaxed mode)
    _flushed = 0  # commits handed to the OS
    _synced = 0  # commits known to be on disk

    def __init__(self, file_name: str, **kw: Any) -> None:
        kw.setdefault("packer", durable_packer)
        self._deferring = threading.local()
        self._sync_lock = threading.Lock()
        self._headers: dict[int, DataHeader] = {}  # file position -> record header
        self._headers_file: Any = None  # the file object those positions are in
        self._txn_headers: list[DataHeader] = []  # of the commit in progress, by position
        self._txn_positions: list[int] = []
        self._expect: tuple[bytes, bytes] | None = None  # (oid, serial) a store is checking
        try:
            super().__init__(file_name, **kw)
        except BaseException:
            self._release_half_open()
            raise

    def _release_half_open(self) -> None:
        """Let go of the lock and files when opening fails.

        ZODB's constructor takes the ``.lock`` file first and raises later (for example on a
        file that is not a FileStorage) without releasing it; the lock then lives as long as
        the half-built object, which the exception's traceback keeps alive, and every later
        open of the same path in this process is refused as "open in another process".
        """
        for name in ("_file", "_tfile", "_files", "_lock_file"):
            thing = self.__dict__.get(name)
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # pragma: no cover - already failing; keep the first error
                    log.debug("closing %s of a failed open", name, exc_info=True)

    def store(
        self, oid: bytes, oldserial: bytes, data: bytes, version: str, transaction: Any
    ) -> Any:
        with self._lock:  # reentrant; while _expect is set, no other thread reads headers
            old = self._index_get(oid, 0)
            self._expect = (oid, oldserial)
            try:
                result = super().store(oid, oldserial, data, version, transaction)
            finally:
                self._expect = None
            self._txn_positions.append(self._tindex[oid])
            self._txn_headers.append(DataHeader(oid, self._tid, old, self._pos, 0, len(data)))
        if oldserial != z64:  # the old revision and its record header become garbage
            self.replaced_bytes += len(data) + DATA_HDR_LEN
        else:
            self._new_bytes += len(data) + DATA_HDR_LEN
            self._new_records += 1
        return result

    def note_dropped(self, records: int) -> None:
        """Count ``records`` objects that became unreachable (acked or removed entries) as
        garbage. Nothing is stored over them, so :meth:`store` cannot see them; without this
        the estimate misses each item's own record, and a churning queue never looks worth
        packing. Each is taken to be as large as an average new record."""
        if self._new_records:
            self.replaced_bytes += records * self._new_bytes // self._new_records

    def _read_data_header(self, pos: int, oid: Any = None, _file: Any = None) -> Any:
        expect, self._expect = self._expect, None
        if expect is None or _file is not None:
            return super()._read_data_header(pos, oid, _file)
        # The conflict check of store(): its only read of the file.
        h = self._cached_header(pos, oid)
        if h is None or h.tid != expect[1]:
            h = super()._read_data_header(pos, oid)
            self._keep_header(pos, h)
        return h

    def getTid(self, oid: bytes) -> bytes:
        """The transaction id of ``oid``'s current revision (checked for every tree node a
        commit only read: BTrees mark them with ``readCurrent``)."""
        with self._lock:
            pos = self._lookup_pos(oid)
            h = self._cached_header(pos, oid)
            if h is None:
                h = super()._read_data_header(pos, oid)
                self._keep_header(pos, h)
            if h.plen == 0 and h.back == 0:  # an undone creation, as FileStorage says
                raise POSKeyError(oid)
            tid: bytes = h.tid
            return tid

    def _cached_header(self, pos: int, oid: bytes) -> Any:
        if self._headers_file is not self._file:
            return None
        h = self._headers.get(pos)
        return h if h is not None and h.oid == oid else None

    def _keep_header(self, pos: int, h: Any) -> None:
        if h.plen and self._headers_file is self._file:
            self._headers[pos] = h
            if len(self._headers) > HEADER_CACHE:
                del self._headers[next(iter(self._headers))]

    def _begin(self, tid: bytes, u: Any, d: Any, e: Any) -> None:
        self._txn_headers = []  # an aborted commit's records were never written
        self._txn_positions = []
        super()._begin(tid, u, d, e)

    def _remember_headers(self) -> None:
        headers = self._headers
        if self._headers_file is not self._file:  # a pack swapped the file: positions moved
            headers.clear()
            self._headers_file = self._file
        for pos, h in zip(self._txn_positions, self._txn_headers, strict=True):
            headers[pos] = h
        while len(headers) > HEADER_CACHE:
            del headers[next(iter(headers))]
        self._txn_headers = []
        self._txn_positions = []

    def _finish_finish(self, tid: bytes) -> None:
        self._file.flush()  # the commit is now the kernel's: it survives kill -9
        inline = self.sync_each_commit and not getattr(self._deferring, "on", False)
        if inline:
            os.fsync(self._file.fileno())
        self._pos = self._nextpos
        self._index.update(self._tindex)
        self._ltid = tid
        self._remember_headers()
        self._blob_tpc_finish()
        self._flushed += 1
        if inline:
            self._synced = self._flushed

    @contextlib.contextmanager
    def deferring_sync(self) -> Iterator[None]:
        """Commits made by this thread inside leave their fsync to :meth:`sync_through`."""
        self._deferring.on = True
        try:
            yield
        finally:
            self._deferring.on = False

    def flushed(self) -> int:
        """A mark for :meth:`sync_through`: the commits handed to the OS so far."""
        return self._flushed

    def sync_through(self, mark: int) -> None:
        """Return once the commits up to ``mark`` are on disk (fsync unless already done)."""
        if self._synced >= mark:
            return
        with self._sync_lock:
            if self._synced >= mark:
                return  # an fsync that started after our flush covered us
            with self._lock:
                # pack() swaps self._file under this lock; a duplicate descriptor stays valid
                # for the fsync, which then runs without holding up commits.
                if self._file.closed:
                    raise StorageClosed(f"{self.getName()} was closed before its fsync")
                target = self._flushed
                fd = os.dup(self._file.fileno())
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._synced = target

    def unsynced(self) -> bool:
        return self._synced < self._flushed

    def pack(self, t: Any, referencesf: Any, gc: Any = None) -> None:
        super().pack(t, referencesf, gc)
        # The renames that put the packed copy in place must reach the disk too.
        fsync_path(os.path.dirname(os.path.abspath(self.getName())))

    def save_index(self) -> None:
        """Write the ``.index`` file for everything committed so far."""
        with self._lock:
            if not self._is_read_only and not self._file.closed:
                self._save_index()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sync_through(self._flushed)
        super().close()


class StorageClosed(OSError):
    pass


class RelaxedFileStorage(QueueFileStorage):
    """A FileStorage whose commits reach the OS at once and the disk within ``sync_interval``."""

    sync_each_commit = False

    def __init__(
        self, file_name: str, *, sync_interval: float = DEFAULT_SYNC_INTERVAL, **kw: Any
    ) -> None:
        super().__init__(file_name, **kw)
        self.sync_interval = sync_interval
        self._stop = threading.Event()
        self._syncer = threading.Thread(
            target=self._sync_loop, name=f"ackqueue-fsync {file_name}", daemon=True
        )
        self._syncer.start()

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.sync_interval):
            try:
                self.sync_through(self._flushed)
            except Exception:  # keep trying: a full disk may clear
                log.exception("background fsync of %s failed", self.getName())

    def close(self) -> None:
        self._stop.set()
        if self._syncer is not threading.current_thread():
            self._syncer.join()
        super().close()
