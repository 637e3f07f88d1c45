"""The reader of one named queue: a connection of its own, moved up to the latest commit
before each read, whose reads are tried again when a pack or a server restart cuts them.

The writer connection belongs to the group committer; reads go through this one. Callers
serialise them (the queue holds its mutex), which is what makes one connection safe to share
between threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ZODB.Connection import Connection
from ZODB.POSException import ReadConflictError

from ackqueue.errors import StorageError
from ackqueue.records import ROOT_KEY, QueueRecord
from ackqueue.storage.failures import abort_quietly, connection_lost, storage_failed
from ackqueue.storage.store import Store

READ_RETRIES = 5
T = TypeVar("T")


class Reader:
    """Reads of queue ``name`` (its record must be stored already) in ``store``'s database."""

    def __init__(self, store: Store, name: str) -> None:
        self._store = store
        self._conn, self._tm = store.open_reader()
        try:
            self._record: QueueRecord = self._conn.root()[ROOT_KEY][name]
        except BaseException:
            self.close()
            raise
        self._synced = store.commits

    def close(self) -> None:
        abort_quietly(self._tm)
        self._conn.close()

    def read(self, read: Callable[[QueueRecord], T]) -> T:
        """``read(record)``, moved up to the latest commit first.

        A reader left at an older snapshot would load old revisions of the tree, and a pack
        removes those ("object deleted, likely by simultaneous pack"); a pack running in
        another thread can still do so between the move and the read, so that is retried.
        So is a read cut by a ZEO server going away (a server restart): the next load waits
        for the client to connect again, up to the client's ``wait_timeout``.
        """
        for attempt in range(READ_RETRIES):
            commits = self._store.commits
            try:
                if commits != self._synced or attempt:
                    self._tm.begin()
                    self._synced = commits
                return read(self._record)
            except ReadConflictError:
                if attempt == READ_RETRIES - 1:
                    raise
            except Exception as exc:
                if not storage_failed(exc):
                    raise
                if not connection_lost(exc) or attempt == READ_RETRIES - 1:
                    raise self._failed(exc) from exc
        raise AssertionError("unreachable")

    def _failed(self, exc: BaseException) -> StorageError:
        return StorageError(f"cannot read queue storage {self._store.where}: {exc!r}")

    def catch_up(self) -> None:
        """Move to the latest commit of any process (shared mode's refresh)."""
        try:
            self._tm.begin()
        except Exception as exc:
            if storage_failed(exc):
                raise self._failed(exc) from exc
            raise
        self._synced = self._store.commits

    @property
    def record(self) -> QueueRecord:
        """The record as of the last read."""
        return self._record

    @property
    def connection(self) -> Connection:
        """The ZODB connection reads go through (its object cache, for footprint checks)."""
        return self._conn

    def root(self) -> Any:
        """The database root as of the last read."""
        return self._conn.root()
