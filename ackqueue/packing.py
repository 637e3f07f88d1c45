"""Automatic packing: keep a queue file near the size of what it holds, with no user action.

FileStorage only appends, so a queue file grows by every put, get and ack. :class:`AutoPacker`
watches the file size after each commit and packs in a background thread once the bytes
written since the last pack reach both a floor (``min_bytes``) and the size the last pack left
(so packing costs at most about one copy of the live data per byte written: amortised O(1)).
The size a pack leaves is kept in the database root, so short-lived processes that each write
a little still pack in time.

A pack holds FileStorage's commit lock only while copying what was committed during the pack,
so producers and consumers keep running. ``.old`` copies are not kept.

Between packs, every ``index_every`` bytes the packer also saves FileStorage's index file
(FileStorage writes it only on close and pack), so reopening after a crash scans at most that
much of the file instead of all of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import ZODB

log = logging.getLogger("ackqueue")

# The root key holding the file size the last pack left (an int, not a persistent object).
PACKED_SIZE_KEY = "ackqueue.packed_size"
DEFAULT_MIN_BYTES = 2 * 1024 * 1024
DEFAULT_INDEX_EVERY = 16 * 1024 * 1024


class AutoPacker:
    """Packs one database's storage when enough has been written since the last pack."""

    def __init__(
        self,
        db: ZODB.DB,
        record_size: Callable[[int], None],
        packed_size: int,
        min_bytes: int = DEFAULT_MIN_BYTES,
        index_every: int = DEFAULT_INDEX_EVERY,
    ) -> None:
        self._db = db
        self._storage: Any = db.storage
        self._record_size = record_size
        self.min_bytes = min_bytes
        self.packed_size = packed_size
        self.index_every = index_every
        self._indexed_size = 0  # file size at the last index save we know of
        self.packs = 0
        self._pack_lock = threading.Lock()  # guards _thread and _closed
        self._run_lock = threading.Lock()  # one pack at a time, automatic or asked for
        self._thread: threading.Thread | None = None
        self._closed = False

    def due(self) -> bool:
        written = self._storage.getSize() - self.packed_size
        return written >= max(self.min_bytes, self.packed_size)

    def index_due(self) -> bool:
        can_save = hasattr(self._storage, "save_index")
        return can_save and self._storage.getSize() - self._indexed_size >= self.index_every

    def after_commit(self) -> None:
        """Called after each commit: start a background pack or index save if due. Cheap."""
        if self._closed or self._thread is not None or not (self.due() or self.index_due()):
            return
        with self._pack_lock:
            if self._closed or self._thread is not None:
                return
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

    def _background(self) -> None:
        try:
            if self.due():
                self._pack()
            else:
                size = self._storage.getSize()
                self._storage.save_index()
                self._indexed_size = size
        except Exception:
            # Try again only after another min_bytes, not at the very next commit.
            self.packed_size = self._indexed_size = self._storage.getSize()
            log.exception("automatic pack or index save of %s failed", self._storage.getName())
        finally:
            with self._pack_lock:
                self._thread = None

    def _pack(self) -> None:
        with self._run_lock:
            self._db.pack()
            self.packs += 1
            size = self._storage.getSize()
            self.packed_size = self._indexed_size = size
        if not self._closed:
            self._record_size(size)

