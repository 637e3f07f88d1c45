"""Putting right what a crash, a full disk or an interrupted pack leaves in a queue file.

FileStorage recovers from a torn last transaction by itself (it truncates it on open). These
are the cases it does not handle, each found by the fault tests (tests/test_faults.py,
test_torn_writes.py, test_disk_full.py, test_interrupts.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import zc.lockfile
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.FileStorage import packed_version

from ackqueue.errors import StorageError

log = logging.getLogger("ackqueue")

T = TypeVar("T")

FILESTORAGE_MAGIC: bytes = packed_version  # the 4 bytes every FileStorage file starts with


def before_open(path: str) -> None:
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


class PendingRepair:
    """Whether a failed write left debris that the next commit must cut off first."""

    def __init__(self) -> None:
        self.needed = False


def after_failed_write(
    pending: PendingRepair, storage: Any, where: str, change: Callable[[], T]
) -> Callable[[], T]:
    """``change``, preceded by cutting off what a failed write left behind.

    When FileStorage fails to write a transaction (disk full), it tries to truncate the
    file back, but its buffered file must flush first, which fails the same way: the
    unwritten rest of the failed transaction stays in the buffer. Once space returns,
    the next write flushes it past the next transaction's end, and at the next open
    FileStorage reads that debris as a transaction header and takes its garbage id as
    the last transaction id: every later commit then gets an id centuries ahead, and
    packing by time stops working. So the truncation is done again, once it can succeed.
    It runs inside the change: the group committer serialises it with every commit.
    """

    def repaired() -> T:
        _truncate_to_last_commit(pending, storage, where)
        return change()

    return repaired


def _truncate_to_last_commit(pending: PendingRepair, storage: Any, where: str) -> None:
    if not isinstance(storage, FileStorage):
        pending.needed = False
        return
    with storage._lock:
        if not pending.needed:
            return
        try:
            storage._file.truncate(storage._pos)
            storage._file.flush()
        except OSError as exc:
            raise StorageError(
                f"cannot write to queue storage {where}: {exc} "
                "(still failing since an earlier write failed)"
            ) from exc
        pending.needed = False
