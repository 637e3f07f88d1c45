"""Opening a queue file as a FileStorage, with ackqueue's errors and nothing left behind.

A directory or a foreign file is refused before FileStorage creates anything beside it; an
open that fails removes what it created; a file another process holds is a
:class:`~ackqueue.QueueLockedError` that says how to open it from several processes; a torn
tail is repaired first (:mod:`.repair`); the index rebuilt after a kill -9 is ackqueue's own
INFO line, not ZODB's warning.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator

import zc.lockfile
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.FileStorage import FileStorageError

from ackqueue.errors import NotAQueueFileError, QueueLockedError, StorageError
from ackqueue.storage import leftovers, repair, sharedserver
from ackqueue.storage.durability import QueueFileStorage, RelaxedFileStorage

log = logging.getLogger("ackqueue")


class _IndexRebuildNotice(logging.Filter):
    """FileStorage's "Ignoring index for PATH", for the files ackqueue is opening, as
    ackqueue's own INFO line: after a kill -9 the index saved earlier is older than the file
    and is rebuilt from it, as expected, with nothing for the user to do."""

    MESSAGE = "Ignoring index for %s"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._opening: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != self.MESSAGE or not isinstance(record.args, tuple) or not record.args:
            return True
        with self._lock:
            ours = record.args[0] in self._opening
        if ours:
            log.info("%s was not closed cleanly; rebuilding its index from the file",
                     record.args[0])
        return not ours

    def opening(self, path: str) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def scope() -> Iterator[None]:
            with self._lock:
                self._opening[path] = self._opening.get(path, 0) + 1
            try:
                yield
            finally:
                with self._lock:
                    self._opening[path] -= 1
                    if not self._opening[path]:
                        del self._opening[path]

        return scope()


_index_notice = _IndexRebuildNotice()
logging.getLogger("ZODB.FileStorage").addFilter(_index_notice)


def _created_beside(path: str) -> list[str]:
    """The files FileStorage makes beside ``path`` on open that are not there yet."""
    return [p for p in (path + ".lock", path + ".tmp", path + ".index") if not os.path.exists(p)]


def _check_is_filestorage(path: str) -> None:
    """Refuse a directory or a foreign file before FileStorage creates anything beside it."""
    if os.path.isdir(path):
        raise StorageError(f"cannot open queue file {path}: {os.strerror(errno.EISDIR)}")
    try:
        with open(path, "rb") as f:
            head = f.read(len(repair.FILESTORAGE_MAGIC))
    except FileNotFoundError:
        return  # a new queue file
    except OSError:
        return  # let FileStorage's own opening report it, as before
    if len(head) == len(repair.FILESTORAGE_MAGIC) and head != repair.FILESTORAGE_MAGIC:
        raise NotAQueueFileError(
            f"{path} is not a ZODB FileStorage file (it does not start with a FileStorage header)"
        )


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
    created: list[str] = []
    try:
        if read_only:
            return kind(path, read_only=True, pack_keep_old=False)
        created = _created_beside(path)
        repair.before_open(path)
        copies = leftovers.truncation_copies(path)
        with _index_notice.opening(path):
            storage = kind(path, read_only=False, pack_keep_old=False)
        created = []
        leftovers.remove_new_truncation_copies(path, copies)
        return storage
    except zc.lockfile.LockError:
        created = []  # the lock file is the other process's
        if sharedserver.served_by(path):
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
    except FileStorageError as exc:
        why = "it does not start with a FileStorage header" if str(exc) == path else str(exc)
        raise NotAQueueFileError(f"{path} is not a ZODB FileStorage file ({why})") from None
    except PermissionError as exc:
        raise StorageError(f"cannot open queue file {path}: permission denied ({exc})") from None
    except OSError as exc:
        raise StorageError(f"cannot open queue file {path}: {exc}") from None
    finally:
        for leftover in created:  # an open that failed leaves nothing beside the user's file
            with contextlib.suppress(OSError):
                os.remove(leftover)
