"""The FileStorage engine: a queue file that this process opens, fsyncs, repairs and packs.

``AckQueue(path)`` (or ``file://``) opens the file as a :class:`QueueFileStorage`, the
FileStorage subclass below; :data:`FILE` is the engine the store's registry holds for it.
What follows is each part of it in turn: durability, opening, repair, the files FileStorage
leaves beside the queue file, and automatic packing.

Durability
----------

How durable a commit is when ``put``/``ack`` return: ``"strict"`` or ``"relaxed"``.

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

Opening
-------

A queue file opens as a FileStorage with ackqueue's errors and nothing left behind.

A directory or a foreign file is refused before FileStorage creates anything beside it; an
open that fails removes what it created; a file another process holds is a
:class:`~ackqueue.QueueLockedError` that says how to open it from several processes; a torn
tail is repaired first (see Repair); the index rebuilt after a kill -9 is ackqueue's own
INFO line, not ZODB's warning.

Repair
------

What a crash, a full disk or an interrupted pack leaves in a queue file is put right.

FileStorage recovers from a torn last transaction by itself (it truncates it on open). These
are the cases it does not handle, each found by the fault tests (tests/test_faults.py,
test_torn_writes.py, test_disk_full.py, test_interrupts.py).

Leftover files
--------------

FileStorage leaves files beside a queue file that nothing will read again:

* ``<file>.tmp``: FileStorage's scratch file for the first phase of a commit. It is created
  (truncated) by every writable open and closed, never removed, by ``close()``: after close it
  is dead weight, and the next open makes a new one.
* ``<file>.tr0``, ``.tr1``, ...: when an open finds that the file's last transaction never
  finished (cut short by a crash or power loss, or still flagged ``c``, checkpoint, as it is
  between a commit's vote and its finish), ``read_index`` copies that tail to the first free
  ``.trN`` name and truncates the file (``FileStorage._truncate``). ZODB offers no option to
  skip the copy. When the copy is only that unfinished commit (one transaction, still flagged
  ``c`` or cut short), nothing in it was promised to anyone: the copy made by our own open is
  removed (a warning says so). But FileStorage cuts the same way at a damaged byte in the
  middle of the file (a wrong transaction length or status, read when a kill -9 left the index
  stale), and then the copy holds every commit after it, puts and acks that returned. Such a
  copy is kept, with the file as it was cut (``.trN.before``), and an error names both and the
  command that puts its items back (``ackqueue salvage``). Copies that were there before (an
  earlier version, ``fsrecover``) are left alone.

``.index`` (fast reopen) and ``.lock`` (zc.lockfile leaves the file; removing it would race
with another opener) stay.

Packing
-------

A pack copies what is live, not what was written.

FileStorage's own packer (``ZODB.FileStorage.fspack``) finds the record each object had at
the pack time by reading every transaction before that time, in Python, and then reads them
all again to copy the ones still reachable. A queue writes a transaction per put and per ack,
and most of them are garbage by the next pack: so each pack cost as much as everything
written since the last one, in headers parsed one by one. Measured on a 2-core machine
(tmpfs, 100-byte items, ``benchmarks/bench_cpu.py``), that was 15-20 us of CPU for every put
and every ack, about an eighth of what the operation itself cost.

:func:`live_packer` writes the same copy from what FileStorage already holds in memory. Its
index gives each object's current record; the few records written after the pack time are
followed back (each data record points to its object's previous one) to the record current at
the pack time; reachability from the root is found by fspack's own walk; and only the
reachable records are read and copied, grouped by the transaction that wrote them, in file
order. Its cost follows the live data (objects, not transactions), and the copy it writes is
byte for byte FileStorage's (``tests/storage/test_live_pack.py`` packs the same files both
ways and compares the bytes). Everything around the copy is FileStorage's: the transactions
after the pack time are copied by its ``copyRest`` under its commit lock, and the copy
replaces the file in ``FileStorage.pack``. It subclasses fspack's ``GC`` and
``FileStoragePacker`` and uses their attributes (``oid2curpos``, ``packpos``, ``reachable``,
``_tfile``...), which ZODB does not document: that byte-for-byte test is what checks them
against each ZODB release CI installs. A storage with blobs is packed by FileStorage's packer
(its blob bookkeeping reads every record). One difference: damage in a transaction
none of whose records is live any more is not read, so not reported (FileStorage's packer
refused to pack then, leaving the damaged file as it was); the pack drops that transaction,
and what it copies is checked as FileStorage's packer checks it.

Automatic packing
-----------------

Keep a queue file near the size of what it holds, with no user action.

FileStorage only appends, so a queue file grows by every put, get and ack. :class:`AutoPacker`
estimates after each commit how much of the file is garbage and packs once that reaches both a
floor (``min_bytes``) and the size of the rest (the live data), so a pack copies at most about
as much as was written since the last one: amortised O(1) per operation. A file of up to
``INLINE_PACK_BYTES`` (4 MB) is packed by the put or ack whose commit made the pack due, before
it returns (a few ms a MB); a larger one in a background thread. A pack costs the same CPU in
either thread by itself, but in the background it hands the GIL back and forth with the
committing threads at each of its reads and their commits: measured on a 2-core machine
(tmpfs, 3,000 puts then 3,000 get+acks, 100-byte items), the process spent 170 and 185 us an
operation with background packs against 110 and 114 with the same packs in line (93 and 99
without packing), and wall time moved alike.

The estimate counts the bytes of revisions stored over older ones (each commit rewrites the
tree nodes it touches); a file that only grows, such as one being filled in big batches, is not
packed for nothing. While the live data shrinks (a backlog being burnt down), the garbage must
also reach ``PEAK_SHARE`` of the most live data seen since the last pack: a pack in the middle
of a burn-down would copy entries that are garbage a moment later, and this leaves one pack
near the end of it that copies little, at the price of a file up to
about 1.75 times the most it held since the last pack. The estimate is kept in the database
root (with each index save and at close) and carried over to the next session, and half of
what a session killed before saving it wrote is taken for garbage, so short-lived processes
that each write a little still pack in time.

A pack holds FileStorage's commit lock only while copying what was committed during the pack,
so other producers and consumers keep running (in line, only the thread that packs waits);
only if they write as much as the pack copies before it is done do they wait for it, which
bounds the file however busy the machine is.
``.old`` copies are not kept.

Between packs, every ``index_every`` bytes the packer also saves FileStorage's index file
(FileStorage writes it only on close and pack), so reopening after a crash scans at most that
much of the file instead of all of it.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import io
import itertools
import logging
import os
import shutil
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import zc.lockfile
import ZODB
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.FileStorage import FileStorageError, RedundantPackWarning, packed_version
from ZODB.FileStorage.format import DATA_HDR_LEN, TRANS_HDR, TRANS_HDR_LEN, DataHeader
from ZODB.FileStorage.fspack import GC, FileStoragePacker
from ZODB.fsIndex import fsIndex
from ZODB.POSException import POSKeyError
from ZODB.utils import p64, u64, z64

from ackqueue.base.interrupts import Shield
from ackqueue.errors import (
    DamagedFileError,
    NotAQueueFileError,
    QueueLockedError,
    StorageError,
    UnsafeRecordError,
    damaged_message,
)
from ackqueue.records import transaction_metadata
from ackqueue.storage import zeo
from ackqueue.storage.commit import Syncer
from ackqueue.storage.engine import (
    CACHE_BYTES,
    Engine,
    Packer,
    WriteRepair,
    as_path,
    new_db,
)

log = logging.getLogger("ackqueue")

T = TypeVar("T")

DURABILITIES = ("strict", "relaxed")
DEFAULT_SYNC_INTERVAL = 1.0
# The status bytes of a finished transaction (FileStorage writes "c" until its finish).
FINISHED_STATUSES = (b" ", b"p", b"u")

# Data record headers of recent commits kept in memory (see QueueFileStorage.store): the
# newest HEADER_CACHE, trimmed to that once HEADER_SLACK more were added. Trimmed one at a time,
# each eviction (the dict's oldest key) scanned past the slots of every key deleted before it
# since the dict last resized: about a microsecond a record stored.
HEADER_CACHE = 4096
HEADER_SLACK = 1024


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
    """ackqueue's packer (:func:`live_packer`: FileStorage's copy, made from the live
    records), then an fsync of the packed copy before it replaces the file.

    FileStorage renames the data file to ``.old`` and the ``.pack`` copy into its place right
    after the packer returns, and does not fsync the copy; a power loss soon after would find
    a file whose contents never reached the disk. ``packer`` is FileStorage's documented hook.

    The ``.index`` file goes too, before the renames: it describes the file being replaced
    (as of its last save, often the last pack), and FileStorage writes the packed file's only
    after the renames. A kill between the two left the old index beside the packed file;
    FileStorage's check of an index then read a transaction header at the position the old
    index gave, which in the packed file is any bytes: the next open failed on them (the
    fault tests' kill during a pack, 1 run in CI), and one that happened to parse would have
    been trusted. Without an index, the next open scans the file instead.
    """
    result = live_packer(storage, referencesf, stop, gc)
    if result is not None:
        name = storage.getName()
        copy = name + ".pack"
        failing = "its packed copy could not be synced"
        try:
            fsync_path(copy)
            failing = "the index of the file it replaces could not be removed"
            with contextlib.suppress(FileNotFoundError):
                os.remove(name + ".index")
            fsync_path(os.path.dirname(name) or ".")
        except BaseException as exc:
            # The packer returns holding the commit lock, and FileStorage.pack releases it
            # only once the packer has returned: failing here would leave every later commit
            # and close() waiting for ever. The file stays as it was; the copy goes.
            storage._commit_lock.release()
            with contextlib.suppress(OSError):
                os.remove(copy)
            log.error("packing %s failed: %s (%s); the file is unchanged", name, failing, exc)
            raise
    return result


def live_packer(storage: Any, referencesf: Any, stop: bytes, gc: bool) -> tuple[int, Any] | None:
    """FileStorage's packer, from the live records (see Packing in the module docstring):
    pack ``storage`` to ``stop`` (a raw time stamp).

    Returns, as FileStorage's packer does, None when the pack would free nothing, else the
    end of the packed copy (``<file>.pack``) and its index, with the storage's commit lock held.
    """
    if storage.blob_dir:
        result: tuple[int, Any] | None = FileStorage.packer(storage, referencesf, stop, gc)
        return result
    packer = _LivePacker(storage, referencesf, stop, gc)
    try:
        end = packer.pack()
        if end is None:
            return None
        return end, packer.index
    finally:
        packer.close()


class _LiveGC(GC):
    """fspack's reachability walk, given each object's record at the pack time from the
    storage's index instead of a scan of every transaction before it."""

    def __init__(self, file: Any, eof: int, packtime: bytes, gc: bool, referencesf: Any,
                 index: Any) -> None:
        super().__init__(file, eof, packtime, gc, referencesf)
        self._index = index  # the storage's index as of eof

    def buildPackIndex(self) -> None:  # noqa: N802 (fspack's name)
        self.packpos = pos = self._first_after_packtime()
        current = self.oid2curpos
        for oid, at in self._index.items():
            while at >= pos:  # written after the pack time: back to the revision before it
                at = self._read_data_header(at, oid).prev
            if not at:
                continue  # created after the pack time
            h = self._read_data_header(at, oid)
            if h.plen or h.back:
                current[oid] = at
            # else: an undone creation, which fspack's scan leaves out too

    def _first_after_packtime(self) -> int:
        """Where the first transaction after the pack time starts (the end if none does):
        walked back from the end, over the length each transaction repeats after itself."""
        pos: int = self.eof
        later = status = None  # the transaction after the one read: its id and status
        while pos > self._metadata_size:
            self._file.seek(pos - 8)
            tlen = u64(self._file.read(8))
            start = pos - tlen - 8
            if start < self._metadata_size:
                self.fail(pos - 8, "transaction length %d runs past the file's start", tlen)
            th = self._read_txn_header(start)
            if th.tlen != tlen:
                self.fail(pos - 8, "redundant transaction length does not match initial "
                          "transaction length: %d != %d", tlen, th.tlen)
            if th.status not in " pu" or th.tlen < th.headerlen():
                self.fail(start, "invalid transaction header (status %r)", th.status)
            if later is not None and th.tid >= later:
                self.fail(start, "time-stamp reduction after this transaction")
            if th.tid <= self.packtime:
                if later is None:
                    status = th.status  # the last transaction: none is after the pack time
                break
            later, status = th.tid, th.status
            pos = start
        if status == "p":
            # Packed before, to a later time or with nothing written since (packed
            # transactions are a prefix of the file): FileStorage's packer declines so.
            raise RedundantPackWarning("The database has already been packed to a later time"
                                       " or no changes have been made since the last pack")
        return pos


class _LivePacker(FileStoragePacker):
    """fspack's packer with the reachable records before the pack time copied from their
    positions, not found by reading every transaction."""

    def __init__(self, storage: Any, referencesf: Any, stop: bytes, gc: bool) -> None:
        super().__init__(storage, referencesf, stop, gc)
        # The index and the end of the file it describes, together: a commit finishes
        # (updates both) under this lock.
        with storage._lock:
            self.file_end = storage.getSize()
            index = fsIndex()
            index.__setstate__(storage._index.__getstate__())
        self.gc = _LiveGC(self._file, self.file_end, stop, gc, referencesf, index)
        self.ltid = z64  # for checkTxn: the transactions copied follow each other

    def copyToPacktime(self) -> tuple[int, int]:  # noqa: N802 (fspack's name)
        """Copy every reachable record before the pack time, each transaction that holds one
        with only those (flagged packed), in file order; (pack position, copy's end)."""
        reachable = [(pos, oid) for oid, pos in self.gc.reachable.items()]
        for oid, more in self.gc.reach_ex.items():
            reachable.extend((pos, oid) for pos in more)
        reachable.sort()
        out = self._tfile
        new_pos = self._metadata_size
        tpos = new_tpos = 0
        for pos, oid in reachable:
            h = self._read_data_header(pos, oid)
            if h.tloc != tpos:
                if new_tpos:
                    new_pos = self._end_transaction(new_tpos)
                tpos = h.tloc
                th = self._read_txn_header(tpos)
                self.checkTxn(th, tpos)
                th.status = "p"
                new_tpos = out.tell()
                out.write(th.asString())
            if h.plen:
                self._file.seek(pos + DATA_HDR_LEN)  # (the transaction's header was read since)
                data = self._file.read(h.plen)
            else:
                data = self.fetchDataViaBackpointer(oid, h.back)
            self.checkData(th, tpos, h, pos)
            self.writePackedDataRecord(h, data, new_tpos)
        if new_tpos:
            new_pos = self._end_transaction(new_tpos)
        packpos: int = self.gc.packpos
        return packpos, new_pos

    def _end_transaction(self, new_tpos: int) -> int:
        """Write the copied transaction's length at both its ends; where the next one goes."""
        out = self._tfile
        end: int = out.tell() + 8
        tlen = p64(end - new_tpos - 8)
        out.seek(new_tpos + 8)
        out.write(tlen)
        out.seek(end - 8)
        out.write(tlen)
        return end


class _Deferring:
    # A class, not a generator context manager: it runs around every commit, and contextlib's
    # machinery cost a microsecond more each time.
    __slots__ = ("_flag",)

    def __init__(self, flag: threading.local) -> None:
        self._flag = flag

    def __enter__(self) -> None:
        self._flag.on = True

    def __exit__(self, *exc_info: object) -> None:
        self._flag.on = False


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
    # A write of a commit failed (disk full): FileStorage's own cut-back could not flush, and
    # the unwritten rest of that commit waits in the file's buffer (see FailedWriteRepair).
    _write_failed = False
    """Bytes of the file that became garbage (what a pack reclaims) since the count was reset:
    object revisions stored over an older revision, and records whose object was dropped
    (see :meth:`note_dropped`)."""

    _new_bytes = 0  # bytes of records of objects stored for the first time, and their count:
    _new_records = 0  # their average is the size of a typical dropped record (a queue entry)

    _pos: int  # FileStorage's: where the next commit goes, and where the one being made ends
    _nextpos: int
    sync_each_commit = True  # False: only sync_through() and close() fsync (relaxed mode)
    _flushed = 0  # commits handed to the OS
    _synced = 0  # commits known to be on disk

    def __init__(self, file_name: str, **kw: Any) -> None:
        kw.setdefault("packer", durable_packer)
        self._deferring = threading.local()
        self._deferring_scope = _Deferring(self._deferring)  # the flag is per thread: one will do
        self._sync_lock = threading.Lock()
        self._sync_file: Any = None  # the data file _sync_fd duplicates
        self._sync_fd = -1
        self._headers: dict[int, DataHeader] = {}  # file position -> record header
        self._headers_file: Any = None  # the file object those positions are in
        self._txn_stored: list[tuple[bytes, int]] = []  # (oid, data length) of the commit
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
            self._expect = (oid, oldserial)
            try:
                result = super().store(oid, oldserial, data, version, transaction)
            finally:
                self._expect = None
            # Its header is made once the commit is final (_remember_headers): the record's
            # position is in FileStorage's _tindex by then, and an aborted commit makes none.
            self._txn_stored.append((oid, len(data)))
        if oldserial != z64:  # the old revision and its record header become garbage
            self.replaced_bytes += len(data) + DATA_HDR_LEN
        else:
            self._new_bytes += len(data) + DATA_HDR_LEN
            self._new_records += 1
        return result

    def note_dropped(self, records: int, garbage: int = 0) -> None:
        """Count ``records`` objects that became unreachable (acked or removed entries), and
        ``garbage`` bytes of inline entries deleted from their tree buckets, as garbage (a
        bucket rewritten is counted as large as its new revision by :meth:`store`, and one
        emptied is dropped unwritten: the deleted entries' bytes are the rest of the old
        one). Nothing is stored over them, so :meth:`store` cannot see them; without this
        the estimate misses each item's own record, and a churning queue never looks worth
        packing. Each record is taken to be as large as an average new record."""
        self.replaced_bytes += garbage
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
            self._trim_headers()

    def _trim_headers(self) -> None:
        headers = self._headers
        if len(headers) > HEADER_CACHE + HEADER_SLACK:
            newest = itertools.islice(headers.items(), len(headers) - HEADER_CACHE, None)
            self._headers = dict(newest)

    def tpc_vote(self, transaction: Any) -> Any:
        """FileStorage's vote, first cutting off what a failed write left buffered (so that
        the private server of a shared file, which has no Store and its FailedWriteRepair,
        never writes that debris once space returns)."""
        if self._write_failed:  # set under the commit lock, which the vote holds
            self._cut_failed_write()
        try:
            return super().tpc_vote(transaction)
        except OSError:
            self._write_failed = True
            raise

    def _cut_failed_write(self) -> None:
        with self._lock:
            if self._write_failed:
                self._file.truncate(self._pos)  # flushes the debris first: fails while full
                self._file.flush()
                self._write_failed = False

    def _clear_temp(self) -> None:
        """FileStorage's, which seeks the ``.tmp`` scratch file holding a commit's records to
        its start; a seek flushes first, so once a write of it failed (a full disk) every
        seek failed too, and an abort with it: the storage stayed inside that commit (a
        private server then counted its client for ever). The scratch is the aborted commit's
        alone: start an empty one instead."""
        try:
            super()._clear_temp()
        except OSError:
            broken: Any = self.__dict__["_tfile"]
            self._tfile = None
            with contextlib.suppress(OSError):
                broken.close()  # the descriptor closes even where the flush fails
            self._tfile = open(self._file_name + ".tmp", "w+b")  # noqa: SIM115 - the storage's

    def _abort(self) -> None:
        try:
            super()._abort()
        except OSError:
            self._write_failed = True
            raise

    def _begin(self, tid: bytes, u: Any, d: Any, e: Any) -> None:
        self._txn_stored = []  # an aborted commit's records were never written
        super()._begin(tid, u, d, e)

    def _remember_headers(self, tid: bytes) -> None:
        headers = self._headers
        if self._headers_file is not self._file:  # a pack swapped the file: positions moved
            headers.clear()
            self._headers_file = self._file
        positions = self._tindex
        for oid, size in self._txn_stored:
            # Only what the conflict check and getTid read: which object, which transaction,
            # and whether it has data (an undone creation has none).
            headers[positions[oid]] = DataHeader(oid, tid, 0, 0, 0, size)
        self._trim_headers()
        self._txn_stored = []

    def _finish_finish(self, tid: bytes) -> None:
        self._file.flush()  # the commit is now the kernel's: it survives kill -9
        inline = self.sync_each_commit and not getattr(self._deferring, "on", False)
        if inline:
            os.fsync(self._file.fileno())
        if not self._txn_stored:
            # A commit of metadata only (an ack through its queue's entry log, counts.py) is
            # garbage once the count's next fold has made it in the tree: a pack drops a
            # transaction before its pack time that holds no record, and packs fold first.
            self.replaced_bytes += self._nextpos - self._pos
        self._pos = self._nextpos
        self._index.update(self._tindex)
        self._ltid = tid
        self._remember_headers(tid)
        self._blob_tpc_finish()
        self._flushed += 1
        if inline:
            self._synced = self._flushed

    def deferring_sync(self) -> _Deferring:
        """Commits made by this thread inside leave their fsync to :meth:`sync_through`."""
        return self._deferring_scope

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
                if self._file.closed:
                    raise StorageClosed(f"{self.getName()} was closed before its fsync")
                target = self._flushed
                fd = self._sync_descriptor()
            os.fsync(fd)  # outside the storage lock: commits go on meanwhile
            self._synced = target

    def _sync_descriptor(self) -> int:
        """A descriptor of the data file for the fsync (both locks held). A duplicate: pack()
        swaps ``self._file`` and closes the old one under the storage lock only, and the fsync
        runs outside it. One per file, not one per commit (a dup and a close each time);
        closed under the sync lock, so never while an fsync uses it."""
        file = self._file
        if self._sync_file is not file:
            self._close_sync_descriptor()
            self._sync_fd = os.dup(file.fileno())
            self._sync_file = file
        return self._sync_fd

    def _close_sync_descriptor(self) -> None:
        fd, self._sync_fd, self._sync_file = self._sync_fd, -1, None
        if fd >= 0:
            os.close(fd)

    def unsynced(self) -> bool:
        return self._synced < self._flushed

    def pack(self, t: Any, referencesf: Any, gc: Any = None) -> None:
        super().pack(t, referencesf, gc)
        # The renames that put the packed copy in place must reach the disk too.
        fsync_path(os.path.dirname(os.path.abspath(self.getName())))

    def iterator(self, start: bytes | None = None, stop: bytes | None = None) -> Any:
        """FileStorage's transactions, each one's metadata (``extension``) loaded as plain
        data only (:func:`~ackqueue.records.transaction_metadata`): ZODB's own loader would
        run whatever a crafted file's metadata names. Also what the private ZEO server hands
        its clients (it reads ``extension`` on its side)."""
        return _PlainMetadata(super().iterator(start, stop), self.getName())

    def save_index(self) -> None:
        """Write the ``.index`` file for everything committed so far."""
        with self._lock:
            if not self._is_read_only and not self._file.closed:
                self._save_index()

    def _save_index(self) -> None:
        if not self._is_read_only:
            own_file(self.__name__, ".index.index_tmp")  # FileStorage writes it by name
        super()._save_index()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sync_through(self._flushed)
        # Closing flushes the buffer: debris of a failed write must be cut first, or it lands
        # past the last commit. If that still fails, the debris is dropped with the buffer
        # unwritten (or cut off as a torn tail at the next open).
        with contextlib.suppress(Exception):
            if self._file is not None and not self._file.closed:
                self._cut_failed_write()
        try:
            super().close()
        finally:
            # Once the file is closed, no fsync makes another descriptor (it finds it closed).
            with self._sync_lock:
                self._close_sync_descriptor()


class _PlainMetadata:
    """A FileStorage iterator whose transactions' ``extension`` is loaded as plain data only;
    metadata that names a global raises :class:`~ackqueue.UnsafeRecordError` naming the file
    and transaction, before any of it is loaded."""

    def __init__(self, transactions: Any, file: str) -> None:
        self._transactions = transactions
        self._file = file

    def __iter__(self) -> _PlainMetadata:
        return self

    def __next__(self) -> Any:
        txn = next(self._transactions)
        try:
            # The record's own attribute hides ZODB's property, which would load it unsafely.
            txn.extension = transaction_metadata(txn.extension_bytes)
        except UnsafeRecordError as exc:
            raise UnsafeRecordError(
                f"{self._file}: the metadata of transaction {txn.tid.hex()} {exc}; nothing "
                "of it was loaded or run (the file was changed by something other than "
                "ackqueue or ZODB)"
            ) from None
        return txn

    def close(self) -> None:
        self._transactions.close()


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


# -- opening ----------------------------------------------------------------------------------


class _IndexRebuildNotice(logging.Filter):
    """FileStorage's "Ignoring index for PATH", for the files ackqueue is opening, as
    ackqueue's own INFO line: after a kill -9 the index saved earlier is older than the file
    and is rebuilt from it, as expected, with nothing for the user to do."""

    MESSAGE = "Ignoring index for %s"
    # What FileStorage's scan of the transactions after a stale index logs, and goes on, where
    # what it read contradicts what was written before: damage, which the open then reports.
    DAMAGE = frozenset({
        "%s time-stamp reduction at %s",
        "%s has invalid status, %s, at %s",
        "%s incorrect previous pointer at %s",
    })

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._opening: dict[str, list[str]] = {}  # path -> damage found while opening it

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.args, tuple) or not record.args:
            return True
        with self._lock:
            found = self._opening.get(str(record.args[0]))
            if found is not None and record.msg in self.DAMAGE:
                found.append(record.getMessage().removeprefix(str(record.args[0])).strip())
                return False  # the open's DamagedFileError says it
        if record.msg != self.MESSAGE or found is None:
            return True
        log.info("%s was not closed cleanly; rebuilding its index from the file",
                 record.args[0])
        return False

    def opening(self, path: str) -> contextlib.AbstractContextManager[list[str]]:
        """While ``path`` opens: the damage FileStorage's scan logs is collected in the list
        given (one opening of a path at a time: the registry's lock sees to it)."""

        @contextlib.contextmanager
        def scope() -> Iterator[list[str]]:
            found: list[str] = []
            with self._lock:
                self._opening[path] = found
            try:
                yield found
            finally:
                with self._lock:
                    if self._opening.get(path) is found:
                        del self._opening[path]

        return scope()


_index_notice = _IndexRebuildNotice()
logging.getLogger("ZODB.FileStorage").addFilter(_index_notice)


def _created_beside(path: str) -> list[str]:
    """The files FileStorage makes beside ``path`` on open that are not there yet."""
    return [p for p in (path + ".lock", path + ".tmp", path + ".index") if not os.path.exists(p)]


def _check_damage(damage: list[str], path: str) -> None:
    """Refuse a file in which FileStorage's scan found damage it went on past (its own log
    lines, see :class:`_IndexRebuildNotice`): what it read after that may be wrong."""
    if damage:
        raise DamagedFileError(damaged_message(
            path, f"reading its transactions, FileStorage found: {'; '.join(damage[:3])}"
        ))


def _check_read_whole(storage: FileStorage, path: str) -> None:
    """Refuse a read-only view that stops short of the file's end at damage, where a writable
    open would cut the file and keep the rest for ``ackqueue salvage``: FileStorage opened
    read-only stops there without a word, and what it shows would lack the commits after it."""
    end = storage._pos  # where FileStorage stopped reading transactions
    with open(path, "rb") as f:
        f.seek(end)
        tail = f.read()
    if not tail or only_an_unfinished_commit(tail) or _finished_transaction_first(tail):
        # The end; a commit a crash cut short (nothing in it had returned); or one that a
        # live writer finished after FileStorage read that far (ackqueue stats while it runs).
        return
    raise DamagedFileError(
        f"queue file {path} is damaged at byte {end}: FileStorage cannot read the transaction "
        f"there, and the {len(tail)} bytes after it hold commits that had returned. Keep a copy "
        f"of it as it is; opening it with the queue (AckQueue({path!r})) cuts it there and keeps "
        f"the rest as {path}.trN, which `ackqueue salvage {path}.trN --into {path}` puts back"
    )


def _finished_transaction_first(tail: bytes) -> bool:
    """Whether ``tail`` starts with a whole finished transaction (its length repeated after
    it)."""
    if len(tail) < TRANS_HDR_LEN:
        return False
    _tid, length, status, *_ = struct.unpack(TRANS_HDR, tail[:TRANS_HDR_LEN])
    if status not in FINISHED_STATUSES or length < TRANS_HDR_LEN or len(tail) < length + 8:
        return False
    return bool(struct.unpack(">Q", tail[length : length + 8])[0] == length)


def _check_is_filestorage(path: str) -> None:
    """Refuse a directory or a foreign file before FileStorage creates anything beside it."""
    if os.path.isdir(path):
        raise StorageError(f"cannot open queue file {path}: {os.strerror(errno.EISDIR)}")
    try:
        with open(path, "rb") as f:
            head = f.read(len(FILESTORAGE_MAGIC))
    except FileNotFoundError:
        return  # a new queue file
    except OSError:
        return  # let FileStorage's own opening report it, as before
    if len(head) == len(FILESTORAGE_MAGIC) and bytes_apart(head, FILESTORAGE_MAGIC) == 1:
        raise DamagedFileError(damaged_message(
            path,
            f"its first bytes read {head!r}, a byte away from FileStorage's {FILESTORAGE_MAGIC!r}",
        ))
    if len(head) == len(FILESTORAGE_MAGIC) and head != FILESTORAGE_MAGIC:
        raise NotAQueueFileError(
            f"{path} is not a ZODB FileStorage file (it does not start with a FileStorage header)"
        )


def bytes_apart(one: bytes, other: bytes) -> int:
    """In how many places two strings of bytes of one length differ."""
    return sum(a != b for a, b in zip(one, other, strict=True))


def restore_magic(path: str) -> bool:
    """Put FileStorage's first bytes right in ``path`` (a scratch copy) when a byte of them was
    changed; whether it did."""
    with open(path, "r+b") as f:
        head = f.read(len(FILESTORAGE_MAGIC))
        if len(head) != len(FILESTORAGE_MAGIC) or bytes_apart(head, FILESTORAGE_MAGIC) != 1:
            return False
        f.seek(0)
        f.write(FILESTORAGE_MAGIC)
    return True


def _lock_owner(path: str) -> str:
    try:
        with open(path + ".lock") as f:
            pid = f.read().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid else ""


def open_file_storage(
    path: str, read_only: bool = False, durability: str = "strict"
) -> FileStorage:
    """Open ``path`` as a FileStorage, turning ZODB's errors into ones that name the file."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise StorageError(f"cannot open queue file {path}: directory {directory} does not exist")
    kind = RelaxedFileStorage if durability == "relaxed" and not read_only else QueueFileStorage
    _check_is_filestorage(path)
    own_file(path, ".index", make=False)  # unpickled at open: another user's would run code
    created: list[str] = []
    try:
        if read_only:
            with _index_notice.opening(path) as damage:
                storage = kind(path, read_only=True, pack_keep_old=False)
            try:
                _check_damage(damage, path)
                _check_read_whole(storage, path)
            except BaseException:
                storage.close()
                raise
            return storage
        created = _created_beside(path)
        for suffix in (".lock", ".tmp"):
            own_file(path, suffix)
        repair_before_open(path)
        copies = truncation_copies(path)
        with _index_notice.opening(path) as damage:
            storage = kind(path, read_only=False, pack_keep_old=False)
        try:
            _check_damage(damage, path)
        except BaseException:
            storage.close()
            raise
        created = []
        remove_new_truncation_copies(path, copies)
        return storage
    except zc.lockfile.LockError:
        created = []  # the lock file is the other process's
        if zeo.served_by(path):
            raise QueueLockedError(
                f"queue file {path} is in use by processes that opened it with shared=True "
                f"(its server{_lock_owner(path)} holds it); open it with "
                f"AckQueue({path!r}, shared=True) here too"
            ) from None
        raise QueueLockedError(
            f"queue file {path} is open in another process{_lock_owner(path)}; only one "
            "process may open it like this: to use it from several processes, open it with "
            f"AckQueue({path!r}, shared=True) in every process"
        ) from None
    except (FileStorageError, ValueError, struct.error) as exc:
        if isinstance(exc, FileStorageError) and str(exc) == path:
            raise NotAQueueFileError(
                f"{path} is not a ZODB FileStorage file (it does not start with a FileStorage "
                "header)"
            ) from None
        # Its header is FileStorage's (checked above): what FileStorage could not read further
        # on is damage, which a read-only open cannot cut off as a writable one does (nor
        # either open a data record's header that does not parse, ZODB's ValueError).
        why = str(exc).removeprefix(path).strip()
        if not isinstance(exc, FileStorageError):
            why = f"a record's header does not parse ({type(exc).__name__}: {why})"
        raise DamagedFileError(damaged_message(path, why)) from exc
    except StorageError:
        raise  # ours, said already (a damaged file)
    except PermissionError as exc:
        raise StorageError(f"cannot open queue file {path}: permission denied ({exc})") from None
    except OSError as exc:
        raise StorageError(f"cannot open queue file {path}: {exc}") from None
    finally:
        for leftover in created:  # an open that failed leaves nothing beside the user's file
            with contextlib.suppress(OSError):
                os.remove(leftover)


# -- repair -----------------------------------------------------------------------------------


FILESTORAGE_MAGIC: bytes = packed_version  # the 4 bytes every FileStorage file starts with


def repair_before_open(path: str) -> None:
    """Repair what can be repaired before FileStorage opens ``path``."""
    _recover_interrupted_pack(path)
    _forget_torn_header(path)


def _recover_interrupted_pack(path: str) -> None:
    """Put back a file that a pack had moved aside when it was killed or interrupted.

    FileStorage ends a pack by renaming the file to ``.old`` and then ``.pack`` to the
    file. Between the two renames the file does not exist, and opening it would start a
    new, empty database. ``.old`` then holds every committed transaction (the pack holds
    the commit lock across the swap), so it is the file.
    """
    old = path + ".old"
    if os.path.exists(path) or not os.path.exists(old):
        return
    lock = zc.lockfile.LockFile(path + ".lock")  # not while a live process packs it
    try:
        if not os.path.exists(path) and os.path.exists(old):
            log.warning(
                "%s was missing after an interrupted pack; restoring it from %s", path, old
            )
            os.rename(old, path)
            for leftover in (path + ".index", path + ".pack"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(leftover)
    finally:
        lock.close()


def _forget_torn_header(path: str) -> None:
    """Empty a file that holds only part of FileStorage's 4-byte header.

    That is what a crash while the file was being created can leave; it holds no data,
    and FileStorage would take it for a foreign file.
    """
    try:
        size = os.path.getsize(path)
    except OSError:
        return
    if 0 < size < len(FILESTORAGE_MAGIC):
        lock = zc.lockfile.LockFile(path + ".lock")  # not under a live process's feet
        try:
            with open(path, "r+b") as f:
                head = f.read()
                if len(head) < len(FILESTORAGE_MAGIC) and FILESTORAGE_MAGIC.startswith(head):
                    f.truncate(0)
        finally:
            lock.close()


class FailedWriteRepair:
    """Cuts off what a failed write left at the end of a FileStorage, before the next commit.

    When FileStorage fails to write a transaction (disk full), it tries to truncate the
    file back, but its buffered file must flush first, which fails the same way: the
    unwritten rest of the failed transaction stays in the buffer. Once space returns,
    the next write flushes it past the next transaction's end, and at the next open
    FileStorage reads that debris as a transaction header and takes its garbage id as
    the last transaction id: every later commit then gets an id centuries ahead, and
    packing by time stops working. So the truncation is done again, once it can succeed.
    """

    def __init__(self, storage: FileStorage, where: str) -> None:
        self.needed = False  # set by the store when a write failed
        self._storage = storage
        self._where = where

    def first(self, change: Callable[[], T]) -> Callable[[], T]:
        """``change``, preceded by the truncation. It runs inside the change: the group
        committer serialises it with every commit."""

        def repaired() -> T:
            self._truncate_to_last_commit()
            return change()

        return repaired

    def _truncate_to_last_commit(self) -> None:
        storage: Any = self._storage
        with storage._lock:
            if not self.needed:
                return
            try:
                storage._file.truncate(storage._pos)
                storage._file.flush()
            except OSError as exc:
                raise StorageError(
                    f"cannot write to queue storage {self._where}: {exc} "
                    "(still failing since an earlier write failed)"
                ) from exc
            self.needed = False


# -- leftover files ---------------------------------------------------------------------------


def truncation_copies(path: str) -> set[str]:
    """The ``.trN`` files beside ``path`` now."""
    return {
        name for name in glob.glob(glob.escape(path) + ".tr*") if name[len(path) + 3 :].isdigit()
    }


def remove_new_truncation_copies(path: str, before: set[str]) -> None:
    """Remove the ``.trN`` copies that opening ``path`` just made (those not in ``before``),
    when they hold only the unfinished last commit; keep the others for ``ackqueue salvage``."""
    for name in sorted(truncation_copies(path) - before):
        try:
            with open(name, "rb") as f:
                tail = f.read()
        except OSError as exc:
            log.error("could not read %s, the tail FileStorage cut from %s: %s", name, path, exc)
            continue
        if not only_an_unfinished_commit(tail):
            _keep_for_salvage(path, name, len(tail))
            continue
        try:
            os.remove(name)
        except OSError as exc:
            log.warning("could not remove %s, the tail of an unfinished commit: %s", name, exc)
            continue
        log.warning(
            "%s ended in a commit that never finished (%d bytes, from a crash during a "
            "commit); it was dropped, as no put or ack of it had returned",
            path,
            len(tail),
        )


def transactions_damage(path: str) -> str | None:
    """What is wrong with the chain of transaction headers of the FileStorage file ``path``,
    read from its start: a transaction id not after the one before it, a status FileStorage
    never writes, or a length its end does not repeat; None if the chain holds (a commit cut
    short at the end is a crash's, not damage)."""
    with open(path, "rb") as f:
        f.seek(len(FILESTORAGE_MAGIC))
        pos, last = len(FILESTORAGE_MAGIC), b""
        while True:
            head = f.read(TRANS_HDR_LEN)
            if len(head) < TRANS_HDR_LEN:
                return None
            tid, length, status, *_ = struct.unpack(TRANS_HDR, head)
            if tid <= last:
                return f"its transaction at byte {pos} is stamped before the one before it"
            if status == b"c":
                return None  # a commit cut short: the last, from a crash
            if status not in FINISHED_STATUSES:
                return f"its transaction at byte {pos} has status {status!r}"
            f.seek(pos + length)
            repeated = f.read(8)
            if len(repeated) < 8:
                return None
            if struct.unpack(">Q", repeated)[0] != length:
                return f"the length of its transaction at byte {pos} is not repeated at its end"
            pos, last = pos + length + 8, tid


def only_an_unfinished_commit(tail: bytes) -> bool:
    """Whether a tail FileStorage cut holds no finished transaction: the last commit, voted
    and never finished (flagged ``c``), alone; or bytes in which no whole finished transaction
    can be found (a commit cut short by a crash or a power loss).

    Anything else is kept: a tail that starts otherwise than with that commit is a finished
    one FileStorage could not read (a damaged byte), and what it holds had returned.
    """
    if len(tail) < TRANS_HDR_LEN:
        return True
    _tid, length, status, *_ = struct.unpack(TRANS_HDR, tail[:TRANS_HDR_LEN])
    if status == b"c" and len(tail) <= length + 8:
        return True
    return not _holds_a_finished_transaction(tail)


# A transaction's length repeated after it is below 2**40 (a terabyte): its first bytes are 0.
_LENGTH_HIGH_BYTES = b"\x00\x00\x00"
ZERO_RUN_WINDOW = 4096  # bytes looked at a time for where a run of zero bytes starts


def _holds_a_finished_transaction(tail: bytes) -> bool:
    """Whether a whole finished transaction lies in ``tail``: a header with a finished status
    whose length is repeated right after the transaction. From the end, the chain of repeated
    lengths leads back over commits still flagged ``c`` to a finished one; a torn end is
    passed over (:func:`_last_whole_transaction`)."""
    found = _last_whole_transaction(tail, len(tail))
    while found is not None:
        start, _end = found
        if tail[start + 16 : start + 17] in FINISHED_STATUSES:
            return True
        found = _last_whole_transaction(tail, start)  # one still flagged "c": look before it
    return False


def _last_whole_transaction(tail: bytes, end: int) -> tuple[int, int] | None:
    """Where the last whole transaction of ``tail[:end]`` starts and ends (after its repeated
    length), None if there is none. A torn end (the last commit cut short during its write, by
    a crash or a power loss) repeats no length: the search goes on back from each place where
    one could end."""
    while end >= TRANS_HDR_LEN + 8:
        if not any(tail[end - 8 : end]):
            # Inside a run of zero bytes (an item's, or blocks a power loss left unwritten):
            # no length ends there, only one that takes in the last byte before the run.
            end = min(end - 1, _after_last_nonzero(tail, end) + 7)
            continue
        start = _transaction_ending_at(tail, end)
        if start is not None:
            return start, end
        found = tail.rfind(_LENGTH_HIGH_BYTES, 0, end - 6)  # a place before ``end``
        if found < 0:
            return None
        end = found + 8
    return None


def _after_last_nonzero(tail: bytes, end: int) -> int:
    """Where the run of zero bytes that ends at ``end`` starts (0: at the start of ``tail``).
    Looked for a window at a time: stripping all of ``tail[:end]`` copied the tail before each
    run, and a torn commit holding thousands of them took minutes of CPU on a large tail."""
    while end > 0:
        start = max(0, end - ZERO_RUN_WINDOW)
        kept = len(tail[start:end].rstrip(b"\x00"))
        if kept:
            return start + kept
        end = start
    return 0


def _transaction_ending_at(tail: bytes, end: int) -> int | None:
    """Where the transaction whose repeated length ends at ``end`` starts, if one does. A
    damaged length in the first header (the byte that made FileStorage cut) is why the first
    transaction is also taken when its repeated length alone spans it."""
    length: int = struct.unpack(">Q", tail[end - 8 : end])[0]
    start = end - 8 - length
    if length < TRANS_HDR_LEN or start < 0:
        return None
    _tid, header_length, _status, *_ = struct.unpack(
        TRANS_HDR, tail[start : start + TRANS_HDR_LEN]
    )
    if header_length != length and start != 0:
        return None
    return start


def _keep_for_salvage(path: str, name: str, size: int) -> None:
    """Keep a cut tail that holds finished commits, with the file as FileStorage cut it."""
    base = name + BEFORE_SUFFIX
    try:
        copy_exclusively(path, base)
    except OSError as exc:
        base_note = f"(the file as it was cut could not be saved to {base}: {exc})"
    else:
        base_note = f"and the file as it was cut in {base}"
    log.error(
        "%s is damaged: FileStorage cut it at byte %d and saved the %d bytes after that "
        "point, which hold commits that had returned (puts and acks), in %s %s. Those items "
        "are missing from the queue until you run: ackqueue salvage %s --into %s",
        path,
        os.path.getsize(path),
        size,
        name,
        base_note,
        name,
        path,
    )


BEFORE_SUFFIX = ".before"


def copy_exclusively(source: str, target: str) -> None:
    """Copy ``source`` to a new file ``target``, fsynced; never through a planted link."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, open(source, "rb") as f:
        shutil.copyfileobj(f, out)
        out.flush()
        os.fsync(out.fileno())


def own_file(path: str, suffix: str, make: bool = True) -> None:
    """Make sure ``path + suffix``, a file beside the queue file ``path`` that FileStorage or
    zc.lockfile opens by name (following links: ``.lock``, ``.tmp``, ``.index.index_tmp``), is
    a regular file of this user's (or root's, or the queue file's owner's: her items are her
    pickles anyway), made now if it is not there (``make=False``: one that FileStorage only
    reads, the ``.index``, which it unpickles).

    In a directory others may write, another user can plant a symlink at such a name before
    it exists: opened through it, the queue's owner would truncate and overwrite the file it
    points to (found by ``benchmarks/fs_faults.py``, issue 21 item 13). A planted link is
    removed (where the directory lets us) and the file made with ``O_EXCL|O_NOFOLLOW``; what
    cannot be made ours is refused. Made exclusively, the file cannot be swapped under the
    open that follows where others may not rename our files (a sticky directory); where they
    may, nothing beside the queue file can be trusted (docs/explanation/security.rst).
    """
    name = path + suffix
    owners = {os.geteuid(), 0}
    with contextlib.suppress(OSError):
        owners.add(os.stat(path).st_uid)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _attempt in range(2):
        if make:
            try:
                os.close(os.open(name, flags, 0o600))
                return
            except FileExistsError:
                pass
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            if make:
                continue
            return
        if stat.S_ISREG(st.st_mode) and st.st_uid in owners:
            return
        if not stat.S_ISLNK(st.st_mode):
            raise StorageError(
                f"{name}, beside the queue file, is not a file of this user's (owner uid "
                f"{st.st_uid}): another user may read or change what is written to it; keep "
                "queue files in a directory only their user can write"
            )
        try:
            os.unlink(name)  # a link someone planted where a file of ours goes
        except OSError as exc:
            raise StorageError(
                f"{name}, beside the queue file, is a symbolic link that cannot be removed "
                f"({exc.strerror}): another user may have planted it to make this process "
                "overwrite another file; keep queue files in a directory only their user can write"
            ) from exc
        if not make:
            return
    raise StorageError(f"{name}, beside the queue file, keeps being replaced by another process")


def remove_commit_scratch(path: str) -> None:
    """Remove FileStorage's ``.tmp`` once the storage on ``path`` is closed."""
    with contextlib.suppress(OSError):
        os.remove(path + ".tmp")


# -- automatic packing ------------------------------------------------------------------------


# The root key holding (size the last pack left, garbage estimate, file size at that estimate),
# a tuple of ints rather than a persistent object.
PACK_STATE_KEY = "ackqueue.pack_state"
DEFAULT_MIN_BYTES = 1024 * 1024
DEFAULT_INDEX_EVERY = 16 * 1024 * 1024
PACKER_CATCH_UP = 5.0  # at most this many seconds a committer waits for a pack running behind
# While live data shrinks, pack once garbage reaches this share of the most live data seen since
# the last pack (see the module docstring): a burn-down's garbage comes to about 0.95 of what it
# started with by its end (measured with 200-byte items), so this leaves a margin.
PEAK_SHARE = 0.75
CHECK_EVERY = 8  # commits between looks at the file size: a look costs as much as a put's pickle
# A file up to this size is packed in the thread whose commit made the pack due, before that
# commit returns; a larger one in a background thread. A pack costs about 6 ms of CPU a MB of
# file on a 2-core machine whether it runs here or there, but a background pack hands the GIL
# back and forth with the committing threads at each of its file reads and their commits, and
# that costs about five times the pack itself (see the module docstring); past this size the
# wait for a pack in line (25 ms and more here) is worth more than the CPU.
INLINE_PACK_BYTES = 4 * 1024 * 1024


class AutoPacker:
    """Packs one database's storage when enough has been written since the last pack."""

    def __init__(
        self,
        db: ZODB.DB,
        record_state: Callable[[tuple[int, int, int]], None],
        state: tuple[int, int, int] | None,
        pack_time: Callable[[], float | None] | None = None,
        min_bytes: int = DEFAULT_MIN_BYTES,
        index_every: int = DEFAULT_INDEX_EVERY,
    ) -> None:
        self._db = db
        # Called before each pack: the pack time to use (None: now); see counts.py.
        self._pack_time = pack_time
        self._storage: QueueFileStorage = db.storage
        self._record_state = record_state
        self.min_bytes = min_bytes
        size = self._storage.getSize()
        packed_size, garbage, then = state if state is not None else (0, 0, 0)
        self.packed_size = packed_size
        # Garbage from earlier sessions: as recorded, plus half of what was written after.
        self._carried = garbage + max(0, size - then) // 2
        self.index_every = index_every
        self._indexed_size = 0  # file size at the last index save we know of
        self._index_lock = threading.Lock()
        self.packs = 0
        self._commits = 0
        # (file size, packs) when the estimate was last recorded, or the session began: a
        # session that wrote nothing records nothing.
        self._recorded_at = (size, 0)
        self._pack_lock = threading.Lock()  # guards _thread and _closed
        self._run_lock = threading.Lock()  # one pack at a time, automatic or asked for
        self._thread: threading.Thread | None = None
        self._pack_done = threading.Event()
        self._pack_done.set()
        self._write_allowance = 0  # file size past which writers wait for the running pack
        self._peak_live = 0  # the most live data seen since the last pack began
        self.inline_bytes = INLINE_PACK_BYTES
        self._closed = False

    def garbage(self) -> int:
        """About how many bytes of the file a pack would reclaim."""
        return int(self._carried + self._storage.replaced_bytes)

    def due(self) -> bool:
        garbage = self.garbage()
        live = int(self._storage.getSize()) - garbage
        self._peak_live = max(self._peak_live, live)
        return garbage >= max(self.min_bytes, live, int(self._peak_live * PEAK_SHARE))

    def index_due(self) -> bool:
        return bool(self._storage.getSize() - self._indexed_size >= self.index_every)

    def after_commit(self) -> None:
        """Called after each commit: save the index or start a background pack if due. Cheap."""
        self._commits += 1
        if self._thread is not None and self._storage.getSize() > self._write_allowance:
            # The pack is falling behind what is being written (committers that keep the GIL
            # busy starve the packer, whose every file read gives it away): let it finish
            # before writing more, so that disk use stays bounded however busy the machine.
            self._pack_done.wait(PACKER_CATCH_UP)
        if self._commits % CHECK_EVERY:
            return
        if self.index_due() and self._index_lock.acquire(blocking=False):
            # In the caller's thread: ~25 ms per million objects, every index_every bytes.
            try:
                size = self._storage.getSize()
                self._storage.save_index()
                self._indexed_size = size
                self.record()
            except Exception:
                self._indexed_size = self._storage.getSize()
                log.exception("saving the index of %s failed", self._storage.getName())
            finally:
                self._index_lock.release()
        if self._closed or self._thread is not None or not self.due():
            return
        if self._storage.getSize() <= self.inline_bytes:
            self._pack_inline()
            return
        with self._pack_lock:
            if self._closed or self._thread is not None:
                return
            self._pack_done.clear()
            # While it runs, writers may add about as much as it copies, then wait for it.
            size, garbage = self._storage.getSize(), self.garbage()
            self._write_allowance = size + max(self.min_bytes, size - garbage)
            self._thread = threading.Thread(
                target=self._background, name="ackqueue-autopack", daemon=True
            )
            self._thread.start()

    def pack(self) -> None:
        """Pack now, in the calling thread (after a background pack in progress)."""
        self._pack()

    def close(self) -> None:
        """Stop packing; waits for a pack in progress to finish (it cannot be interrupted)."""
        with self._pack_lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._run_lock:
            pass  # a pack in another committing thread, or asked for, is over
        try:
            self.record()
        except Exception:  # the file stays correct; the next session guesses the garbage
            log.exception("recording the pack state of %s failed", self._storage.getName())

    def state(self) -> tuple[int, int, int]:
        return self.packed_size, self.garbage(), self._storage.getSize()

    def record(self) -> None:
        """Keep the garbage estimate in the database for the next session (if it moved)."""
        if (self._storage.getSize(), self.packs) == self._recorded_at:
            return  # nothing written since: do not append a commit of its own
        self._record_state(self.state())
        self._recorded_at = (self._storage.getSize(), self.packs)

    def _pack_inline(self) -> None:
        """Pack in this committing thread, unless a pack is running already. Its commit is
        durable: a failed pack is logged, not raised to the put or ack that set it off."""
        try:
            # Ctrl-C between FileStorage's two renames would leave no file and a closed
            # storage: it waits until the pack is over.
            with Shield(interruptible=False):
                self._pack(wait=False)
        except Exception:
            self._pack_failed()

    def _background(self) -> None:
        try:
            self._pack()
        except Exception:
            self._pack_failed()
        finally:
            with self._pack_lock:
                self._thread = None
                self._pack_done.set()

    def _pack_failed(self) -> None:
        # Try again only once as much again is written, not at the very next commit.
        self.packed_size = self._storage.getSize()
        log.exception("automatic pack of %s failed", self._storage.getName())

    def _pack(self, wait: bool = True) -> None:
        """Pack; with ``wait=False``, only if no pack is running and the packer is open."""
        if not self._run_lock.acquire(blocking=wait):
            return
        try:
            if not wait and self._closed:
                return
            # What is replaced from now on is written after the pack time: not reclaimed.
            self._carried = 0
            self._peak_live = 0
            self._storage.replaced_bytes = 0
            self._db.pack(self._pack_time() if self._pack_time is not None else None)
            self.packs += 1
            self.packed_size = self._indexed_size = self._storage.getSize()
        finally:
            self._run_lock.release()
        if not self._closed:
            self.record()


# -- the engine -----------------------------------------------------------------------------------


class FileEngine(Engine):
    """A queue file of this process: ``AckQueue(path)``, ``file://``, or a caller's database on
    a FileStorage (which is used as it is: only the files it opens itself are a
    :class:`QueueFileStorage`, with their fsync, counts and packer)."""

    name = "file"
    schemes = ("file",)
    local_fsync = True
    syncs = True
    commit_hooks = True
    packs = True
    repairs = True

    def owns(self, storage: Any) -> bool:
        return isinstance(storage, FileStorage)

    def open(self, where: str, durability: str) -> ZODB.DB:
        storage = open_file_storage(as_path(where), durability=durability)
        try:
            return new_db(storage, cache_size_bytes=CACHE_BYTES)  # and ZODB's count, 400
        except Exception:
            storage.close()
            raise

    def file(self, storage: Any) -> str | None:
        return None if storage.isReadOnly() else str(storage._file_name)

    def syncer(self, storage: Any) -> Syncer | None:
        if isinstance(storage, QueueFileStorage) and storage.sync_each_commit:
            return storage
        return None  # relaxed: the background thread fsyncs

    def counts_in_log(self, storage: Any) -> bool:
        return isinstance(storage, QueueFileStorage) and not storage.isReadOnly()

    def packer(
        self,
        db: ZODB.DB,
        record_state: Callable[[tuple[int, int, int]], None],
        state: tuple[int, int, int] | None,
        pack_time: Callable[[], float | None],
    ) -> Packer | None:
        if not isinstance(db.storage, QueueFileStorage):
            return None
        return AutoPacker(db, record_state, state, pack_time)

    def note_dropped(self, storage: Any, records: int, garbage: int = 0) -> None:
        if isinstance(storage, QueueFileStorage):
            storage.note_dropped(records, garbage)

    def write_repair(self, storage: Any, where: str) -> WriteRepair | None:
        return FailedWriteRepair(storage, where)

    def closed(self, storage: Any) -> None:
        name = self.file(storage)
        if name is not None:
            remove_commit_scratch(name)

    def disown(self, storage: Any) -> None:
        """A child's descriptors of the file share their offsets with the parent's: a seek or
        a flush here (the child closing its copies at its exit rewinds each by what it read
        ahead) moves where the parent's next write lands. Each descriptor of the file and of
        the files FileStorage writes beside it (a commit's ``.tmp``, the ``.lock``, a pack's
        ``.pack``, the index being saved) is pointed at ``/dev/null`` instead (what the child
        does with it then touches nothing of the parent's)."""
        name = str(storage._file_name)
        wanted = set()
        for suffix in ("", ".tmp", ".lock", ".pack", ".index", ".index.index_tmp"):
            path = name + suffix
            with contextlib.suppress(OSError):
                st = os.stat(path)
                wanted.add((st.st_dev, st.st_ino))
        try:
            open_fds = [int(fd) for fd in os.listdir("/dev/fd")]
        except (OSError, ValueError):  # no /dev/fd: left as they are
            return
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in open_fds:
                try:
                    st = os.fstat(fd)
                except OSError:  # the listing's own descriptor, closed since
                    continue
                if fd != null and (st.st_dev, st.st_ino) in wanted:
                    os.dup2(null, fd, inheritable=False)
        finally:
            os.close(null)


FILE = FileEngine()

def rejoin_cut_file(before: str, tail: str, recovered: str) -> None:
    """Write to ``recovered`` the file FileStorage cut (``before``, kept by ackqueue) with the
    tail it cut off (``tail``, its ``.trN`` copy) put back after it: the tail's first header put
    right where the lengths every transaction repeats lead back to it (:func:`repaired_tail`),
    else through ZODB's own ``fsrecover``, which skips what it cannot read."""
    with open(tail, "rb") as f:
        cut_off = f.read()
    repaired = repaired_tail(cut_off)
    joined = recovered if repaired is not None else recovered + ".joined"
    with open(joined, "wb") as out:
        with open(before, "rb") as f:
            shutil.copyfileobj(f, out)
        out.write(cut_off if repaired is None else repaired)
    if repaired is None:
        recover_structure(joined, recovered)


def recover_structure(damaged: str, recovered: str) -> None:
    """Write to ``recovered`` what ZODB's ``fsrecover`` can read of ``damaged`` (a scratch
    copy, which this changes): it skips the transactions it cannot read.

    ``fsrecover`` looks for the end of an unreadable transaction at each "." (a pickle's last
    byte) followed by 8 bytes; when a "." lies among the file's last 8 bytes it reads the same
    bytes again for ever (ZODB 6.x, ``fsrecover.scan``). Eight zero bytes after the end give
    each "." its 8 bytes; they are too short for a transaction header, where fsrecover stops.
    """
    from ZODB import fsrecover

    with open(damaged, "ab") as f:
        f.write(bytes(8))
    with contextlib.redirect_stdout(io.StringIO()):
        fsrecover.recover(damaged, recovered)


def repaired_tail(tail: bytes) -> bytes | None:
    """``tail`` with its first transaction header put right, when the damage is one that
    FileStorage cuts at (its length or its status) and the length every transaction repeats at
    its end leads back from the last whole transaction to the start of the tail; else None.
    A torn end after that transaction (a commit cut short: it never returned) is left out."""
    last = _last_whole_transaction(tail, len(tail))
    if last is None:
        return None
    start, whole = last
    end = whole
    while start != 0:  # back along the repeated lengths to the tail's first transaction
        end = start
        if end < TRANS_HDR_LEN + 8:
            return None
        found = _transaction_ending_at(tail, end)
        if found is None:
            return None
        start = found
    fixed = bytearray(tail[:whole])
    fixed[8:16] = struct.pack(">Q", end - 8)
    fixed[16:17] = b" "  # a transaction followed by finished ones had finished
    return bytes(fixed)
