"""Automatic packing: keep a queue file near the size of what it holds, with no user action.

FileStorage only appends, so a queue file grows by every put, get and ack. :class:`AutoPacker`
estimates after each commit how much of the file is garbage and packs in a background thread
once that reaches both a floor (``min_bytes``) and the size of the rest (the live data), so a
pack copies at most about as much as was written since the last one: amortised O(1) per
operation. The estimate counts the bytes of revisions stored over older ones (each commit
rewrites the tree nodes it touches); a file that only grows, such as one being filled in big
batches, is not packed for nothing. While the live data shrinks (a backlog being burnt down),
the garbage must also reach ``PEAK_SHARE`` of the most live data seen since the last pack: a
pack in the middle of a burn-down would copy entries that are garbage a moment later, and
this leaves one pack near the end of it that copies little, at the price of a file up to
about 1.75 times the most it held since the last pack. The estimate is kept in the database
root (with each index save and at close) and carried over to the next session, and half of
what a session killed before saving it wrote is taken for garbage, so short-lived processes
that each write a little still pack in time.

A pack holds FileStorage's commit lock only while copying what was committed during the pack,
so producers and consumers keep running; only if they write as much as the pack copies before
it is done do they wait for it, which bounds the file however busy the machine is.
``.old`` copies are not kept.

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
        self._storage: Any = db.storage
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
        self._recorded_at = (0, 0)  # (commits, packs) when the estimate was last recorded
        self._pack_lock = threading.Lock()  # guards _thread and _closed
        self._run_lock = threading.Lock()  # one pack at a time, automatic or asked for
        self._thread: threading.Thread | None = None
        self._pack_done = threading.Event()
        self._pack_done.set()
        self._write_allowance = 0  # file size past which writers wait for the running pack
        self._peak_live = 0  # the most live data seen since the last pack began
        self._closed = False

    def garbage(self) -> int:
        """About how many bytes of the file a pack would reclaim."""
        replaced = getattr(self._storage, "replaced_bytes", None)
        if replaced is None:  # no estimate from this storage: take all growth for garbage
            return max(0, int(self._storage.getSize()) - self.packed_size)
        return int(self._carried + replaced)

    def due(self) -> bool:
        garbage = self.garbage()
        live = int(self._storage.getSize()) - garbage
        self._peak_live = max(self._peak_live, live)
        return garbage >= max(self.min_bytes, live, int(self._peak_live * PEAK_SHARE))

    def index_due(self) -> bool:
        can_save = hasattr(self._storage, "save_index")
        return can_save and self._storage.getSize() - self._indexed_size >= self.index_every

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
        try:
            self.record()
        except Exception:  # the file stays correct; the next session guesses the garbage
            log.exception("recording the pack state of %s failed", self._storage.getName())

    def state(self) -> tuple[int, int, int]:
        return self.packed_size, self.garbage(), self._storage.getSize()

    def record(self) -> None:
        """Keep the garbage estimate in the database for the next session (if it moved)."""
        marker = (self._commits, self.packs)
        if marker == self._recorded_at:
            return  # nothing written since: do not append a commit of its own
        self._record_state(self.state())
        self._recorded_at = marker

    def _background(self) -> None:
        try:
            self._pack()
        except Exception:
            # Try again only once as much again is written, not at the very next commit.
            self.packed_size = self._storage.getSize()
            log.exception("automatic pack of %s failed", self._storage.getName())
        finally:
            with self._pack_lock:
                self._thread = None
                self._pack_done.set()

    def _pack(self) -> None:
        with self._run_lock:
            # What is replaced from now on is written after the pack time: not reclaimed.
            self._carried = 0
            self._peak_live = 0
            if hasattr(self._storage, "replaced_bytes"):
                self._storage.replaced_bytes = 0
            self._db.pack(self._pack_time() if self._pack_time is not None else None)
            self.packs += 1
            self.packed_size = self._indexed_size = self._storage.getSize()
        if not self._closed:
            self.record()

