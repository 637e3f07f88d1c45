"""How durable a commit is when ``put``/``ack`` return: ``"strict"`` or ``"relaxed"``.

``"strict"`` (the default) is plain FileStorage: each commit is written and fsynced before it
returns, so it survives ``kill -9`` and power loss.

``"relaxed"`` is :class:`RelaxedFileStorage`: each commit is written to the operating system
before it returns (so it survives ``kill -9`` of the process, as the kernel holds the data),
and a background thread fsyncs the file every ``sync_interval`` seconds and on close. A power
loss or kernel crash may lose the commits of the last interval, never more, and never leaves a
damaged file: FileStorage truncates a torn last transaction when it opens. This is SQLite's
``synchronous=NORMAL`` in WAL mode or Redis's ``appendfsync everysec``.

The extension point is FileStorage's ``_finish_finish`` method, which ZODB keeps separate so
that it can be replaced ("to allow tests to replace it with something broken"); the subclass
below replaces it with the same steps minus the fsync. ZODB's module globals stay untouched, so
other FileStorages in the process keep their fsync.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

from ZODB.FileStorage import FileStorage
from ZODB.utils import z64

log = logging.getLogger("ackqueue")

DURABILITIES = ("strict", "relaxed")
DEFAULT_SYNC_INTERVAL = 1.0


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
        fsync_path(storage.getName() + ".pack")
    return result


class QueueFileStorage(FileStorage):
    """The FileStorage ackqueue opens: FileStorage plus an index checkpoint.

    FileStorage writes its ``.index`` file only on close and pack; after ``kill -9`` it finds
    the objects written since by scanning the file (about 30 MB/s here). Saving the index now
    and then bounds that scan; saving it takes ~25 ms for a million objects.
    """

    replaced_bytes = 0
    """Bytes of object revisions stored over an older revision since the count was reset:
    about as many bytes of the file became garbage (what a pack reclaims)."""

    def store(
        self, oid: bytes, oldserial: bytes, data: bytes, version: str, transaction: Any
    ) -> Any:
        result = super().store(oid, oldserial, data, version, transaction)
        if oldserial != z64:
            self.replaced_bytes += len(data)
        return result

    def __init__(self, file_name: str, **kw: Any) -> None:
        kw.setdefault("packer", durable_packer)
        super().__init__(file_name, **kw)

    def pack(self, t: Any, referencesf: Any, gc: Any = None) -> None:
        super().pack(t, referencesf, gc)
        # The renames that put the packed copy in place must reach the disk too.
        fsync_path(os.path.dirname(os.path.abspath(self.getName())))

    def save_index(self) -> None:
        """Write the ``.index`` file for everything committed so far."""
        with self._lock:
            if not self._is_read_only and not self._file.closed:
                self._save_index()


class RelaxedFileStorage(QueueFileStorage):
    """A FileStorage whose commits reach the OS at once and the disk within ``sync_interval``."""

    def __init__(
        self, file_name: str, *, sync_interval: float = DEFAULT_SYNC_INTERVAL, **kw: Any
    ) -> None:
        super().__init__(file_name, **kw)
        self.sync_interval = sync_interval
        self._unsynced = False
        self._stop = threading.Event()
        self._syncer = threading.Thread(
            target=self._sync_loop, name=f"ackqueue-fsync {file_name}", daemon=True
        )
        self._syncer.start()

    def _finish_finish(self, tid: bytes) -> None:
        # FileStorage._finish_finish without the fsync: flush() hands the transaction to the
        # kernel, which is what survives kill -9; the disk gets it from _sync_loop.
        self._file.flush()
        self._pos = self._nextpos
        self._index.update(self._tindex)
        self._ltid = tid
        self._blob_tpc_finish()
        self._unsynced = True

    def fsync_now(self) -> None:
        """Fsync now everything committed so far."""
        if not self._unsynced:
            return
        self._unsynced = False
        with self._lock:
            # pack() swaps self._file under this lock; a duplicate descriptor stays valid for
            # the fsync, which then runs without holding up commits.
            if self._file.closed:
                return
            fd = os.dup(self._file.fileno())
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.sync_interval):
            try:
                self.fsync_now()
            except Exception:  # keep trying: a full disk may clear
                self._unsynced = True
                log.exception("background fsync of %s failed", self._file_name)

    def close(self) -> None:
        self._stop.set()
        if self._syncer is not threading.current_thread():
            self._syncer.join()
        with contextlib.suppress(Exception):
            self.fsync_now()
        super().close()
