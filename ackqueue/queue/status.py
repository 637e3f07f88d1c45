"""A small status file beside a live queue's storage, so ``ackqueue stats`` can show holds.

Holds live only in the memory of the process that took them (a get writes nothing), so another
process reading the storage cannot see them. Instead, each process with file-backed queues keeps
``<storage>.status`` up to date: a JSON snapshot of every open queue's held items (owner thread,
delivery id, attempts, when got) and its pid, rewritten atomically by one daemon thread at most
once a second, and only when something changed. The file is removed when the last queue on the
storage closes; one left behind by a killed process names a pid that no longer holds the lock,
so readers know to ignore it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from typing import Any, Protocol

from ackqueue.queue import requests


class Reporting(Protocol):
    """A queue as its status file sees it."""

    @property
    def name(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def storage_file(self) -> str | None: ...

    def status_snapshot(self) -> dict[str, Any]: ...

log = logging.getLogger("ackqueue")

INTERVAL = 1.0
SUFFIX = ".status"


def status_path(storage_path: str) -> str:
    return storage_path + SUFFIX




class StatusBeacon:
    """Keeps the status files of this process's file-backed queues current."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, weakref.WeakSet[Reporting]] = {}
        self._written: dict[str, Any] = {}
        self._thread: threading.Thread | None = None

    def attach(self, queue: Reporting) -> None:
        path = queue.storage_file
        if path is None:
            return
        with self._lock:
            self._queues.setdefault(path, weakref.WeakSet()).add(queue)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="ackqueue-status", daemon=True
                )
                self._thread.start()

    def detach(self, queue: Reporting) -> None:
        path = queue.storage_file
        if path is None:
            return
        with self._lock:
            queues = self._queues.get(path)
            if queues is not None:
                queues.discard(queue)
        self._remove_if_unused(path, missing=True)

    def forget_dropped(self, path: str) -> None:
        """A queue on ``path`` was collected without close(): if none is left, remove the file."""
        self._remove_if_unused(path, missing=False)

    def _remove_if_unused(self, path: str, missing: bool) -> None:
        """Stop writing ``path``'s status file and remove it if no queue on it is left (or,
        with ``missing``, if none is registered at all)."""
        with self._lock:
            queues = self._queues.get(path)
            # Iterate rather than len(): a dropped queue's own weak reference may not have been
            # swept from the set yet, but it no longer yields the queue.
            last = missing if queues is None else next(iter(queues), None) is None
            if last:
                self._queues.pop(path, None)
                self._written.pop(path, None)
        if last:
            with contextlib.suppress(OSError):
                os.unlink(status_path(path))

    def _loop(self) -> None:
        while True:
            time.sleep(INTERVAL)  # at most one write per file per interval
            if not self._write_all():
                return

    def _write_all(self) -> bool:
        """Write every changed status file; False once no queue is left (the thread ends).

        A function of its own so that the strong references to the queues end with each
        round: kept across the sleep, they would keep a queue dropped without close() alive
        for good (see ackqueue.queue.lifecycle)."""
        with self._lock:
            if not self._queues:
                self._thread = None
                return False
            work = {path: list(queues) for path, queues in self._queues.items()}
        for path, queues in work.items():
            try:
                self._write(path, queues)
            except Exception:  # a status file is a courtesy; never let it hurt the queue
                log.debug("could not write the status file of %s", path, exc_info=True)
            try:
                requests.serve(path, queues)
            except Exception:  # serve answers every failure of a change; this is the rest
                log.warning("could not take a request for %s", path, exc_info=True)
        return True

    def _write(self, path: str, queues: list[Reporting]) -> None:
        state = {q.name: q.status_snapshot() for q in queues if not q.closed}
        with self._lock:
            if path not in self._queues or self._written.get(path) == state:
                return
            self._written[path] = state
        body = {"pid": os.getpid(), "written_at": time.time(), "queues": state}
        target = status_path(path)
        tmp = f"{target}.{os.getpid()}.tmp"
        # Owner only: the status file names held items' keys and owners, as the queue file
        # holds their contents, and a process of another user has no business reading either.
        # Made anew, never through a link: in a directory others may write, a name planted
        # there (a symlink to a file of ours) must not make us truncate and overwrite it. A
        # leftover of a killed writer, or a planted link, is unlinked first (never followed).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "w") as f:
            json.dump(body, f)
        os.replace(tmp, target)

    def forget_after_fork(self) -> None:
        """In a child after a fork: the parent's queues are not this process's, nor their
        status files. Kept, the child wrote the parent's file with its own copies of the
        parent's holds, answered requests meant for the parent, and removed the parent's file
        at its exit; and a lock the parent's writer thread held at the fork stayed held."""
        self._lock = threading.Lock()
        self._queues = {}
        self._written = {}
        self._thread = None

    def remove_all(self) -> None:
        """Remove this process's status files (at exit: queues left open hold nothing after)."""
        with self._lock:
            paths = list(self._queues)
            self._queues.clear()
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(status_path(path))


beacon = StatusBeacon()
atexit.register(beacon.remove_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=beacon.forget_after_fork)


def read_status(storage_path: str) -> dict[str, Any] | None:
    """The status file of a storage, or None if there is none or it cannot be read."""
    try:
        with open(status_path(storage_path)) as f:
            body = json.load(f)
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None
