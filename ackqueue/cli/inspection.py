"""Reading a queue file from outside, read-only, even while a live process has it open.

The storage is opened with ``FileStorage(path, read_only=True)``, which takes no lock and writes
nothing; a storage URI (``zeo://host:port``) is opened through ``zodburi`` and only read. In one
process's mode, what a live process holds is not in the file (holds live in its memory); it
comes from the status file that process keeps beside the storage (see :mod:`ackqueue.status`),
or is reported as unknown when there is none. With no live process, nothing is held: every
stored item is ready again at the next open. In shared mode (ZEO, or ``shared=True``) holds are
stored, under the session that took them (see :mod:`ackqueue.holdmarks`), and read from there
together with the sessions themselves.
"""

from __future__ import annotations

import ast
import fcntl
import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from ZODB.POSException import ReadOnlyError
from ZODB.utils import oid_repr, z64

from ackqueue.cli.reports import (
    DeadItem,
    HeldItem,
    QueueStats,
    SessionInfo,
    StoredItem,
    dead_item,
    shown_item,
)
from ackqueue.errors import (
    DamagedFileError,
    NotAQueueFileError,
    StorageError,
    damaged_message,
)
from ackqueue.queue.status import read_status
from ackqueue.records import (
    ROOT_KEY,
    QueueRecord,
    StoredEntry,
    UnreadableEntry,
    attach_entry_log,
    detach_entry_log,
    edge_loaded,
    garbled_root_key,
    queues_of,
    readable_entries,
)
from ackqueue.shared.holdmarks import HOLDS_KEY, holder
from ackqueue.shared.sessions import SESSIONS_KEY, server_time
from ackqueue.storage import zeo
from ackqueue.storage.counts import ReplayedDrops, stored_count
from ackqueue.storage.engine import (
    RecordLoader,
    as_path,
    damage_of,
    is_uri,
    new_db,
    shown,
    stamped_late,
)
from ackqueue.storage.filestorage import open_file_storage
from ackqueue.storage.items import PICKLE, Serializer, stored_serializer
from ackqueue.storage.keys import seen_count, shown_key
from ackqueue.storage.store import open_db
from ackqueue.storage.zeo import zeo_address, zeo_unreachable

Progress = Callable[[int, int], None]

# Bounds that keep `stats` quick on a queue of millions (see QueueFile.stats and live_size).
OLDEST_SCAN = 20_000
LIVE_SAMPLE = 20_000
def reachable(uri: str) -> None:
    """Fail at once, naming the address, if the ZEO server ``uri`` names accepts no connection
    (ZEO's client would wait for one: a command answers now)."""
    why = zeo_unreachable(uri)
    address = zeo_address(uri)
    if why is not None and address is not None:
        raise StorageError(f"cannot reach the ZEO server at {address[0]}:{address[1]}: {why}")


def live_owner(path: str) -> int | None:
    """The pid of a live process holding the storage open, or None.

    FileStorage holds an exclusive ``flock`` on ``<path>.lock`` while open; probing it without
    blocking tells whether a process has the file open now (a killed process holds no lock).
    """
    try:
        fd = os.open(path + ".lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            content = os.pread(fd, 64, 0).decode(errors="replace").strip()
            return int(content) if content.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def process_running(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed but not yet waited for by
    its parent, does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal said it exists
    return state not in (b"Z", b"X")


class QueueFile:
    """A queue storage file opened read-only. Use as a context manager."""

    def __init__(self, path: str) -> None:
        path = as_path(path)
        self.is_file = not is_uri(path)
        if self.is_file:
            if not os.path.exists(path):
                raise StorageError(f"no such queue file: {path}")
            if os.path.isdir(path):
                raise StorageError(f"{path} is a directory, not a queue file")
            if os.path.getsize(path) == 0:
                raise NotAQueueFileError(
                    f"{path} is empty (0 bytes), not a queue file: no queue was ever stored in "
                    "it (AckQueue(path) would start a new one there)"
                )
            self.path = os.path.realpath(path)
            self.live_pid = live_owner(self.path)
            # A live owner with a server listening for the file is that server: the processes
            # that use the queue are its sessions.
            self.served = self.live_pid is not None and zeo.served_by(self.path)
            self._status = self._fresh_status()
            self._storage = open_file_storage(self.path, read_only=True)
        else:  # a shared storage: every live process keeps its holds in it
            reachable(path)
            self.path = shown(path)  # what is printed: never a password
            self.live_pid = None
            self.served = False
            self._status = None
        try:
            try:
                self._db = new_db(self._storage) if self.is_file else open_db(path)
            except ReadOnlyError:
                # Read-only, ZODB cannot add the root a storage that never committed lacks.
                raise NotAQueueFileError(
                    f"{path} is a ZODB storage that was never written to: no queue is stored "
                    "in it"
                ) from None
            self._storage = self._db.storage
            self._conn = self._db.open()
            # What a writer deleted through the log and not yet from the tree (counts.py).
            attach_entry_log(self._conn, ReplayedDrops(self._storage, self._conn))
            root = self._conn.root()
            queues = queues_of(root, create=False)
            self._stored_holds = root.get(HOLDS_KEY)
            self._sessions = root.get(SESSIONS_KEY)
        except Exception:
            self.close()
            raise
        if queues is None:
            garbled = garbled_root_key(root)
            # A root record stamped later than the file's last transaction (a changed byte in
            # its header) is passed over for its previous revision: the empty root of a new file.
            late = stamped_late(self._storage, z64) if self.is_file else None
            self.close()
            if garbled is not None:
                raise DamagedFileError(damaged_message(
                    self.path, f"its root names {garbled!r} where ackqueue wrote {ROOT_KEY!r}"
                ))
            if late is not None:
                raise DamagedFileError(damaged_message(self.path, f"its root record 0x00 {late}"))
            raise NotAQueueFileError(f"{path} is a ZODB storage but holds no ackqueue queues")
        self._queues = queues
        loader = self._db.classFactory
        if isinstance(loader, RecordLoader):
            # As a queue opens it: only ackqueue's records load, unless every queue of the
            # file uses pickle (then the file is code anyway, and priority keys may be any
            # class of the caller's).
            try:
                pickles = all(str(record.serializer) == PICKLE for record in queues.values())
            except Exception:
                self.close()
                raise
            loader.restricted = not pickles

    def close(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            detach_entry_log(conn)  # the log refers to the connection: it would keep it
            conn.close()
        db = getattr(self, "_db", None)
        storage = getattr(self, "_storage", None)
        if db is not None:
            db.close()
        elif storage is not None:
            storage.close()

    def __enter__(self) -> QueueFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- what is in it -------------------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self._queues.keys())

    def record(self, name: str) -> QueueRecord:
        record: QueueRecord | None = self._queues.get(name)
        if record is None:
            known = ", ".join(repr(n) for n in self.names()) or "none"
            raise StorageError(f"no queue named {name!r} in {self.path} (queues: {known})")
        return record

    def kind(self, name: str) -> str:
        return str(self.record(name).kind)

    def serializer(self, name: str) -> str | Serializer:
        """The ``serializer=`` that opens queue ``name`` for a change."""
        return stored_serializer(str(self.record(name).serializer))

    @property
    def holds_known(self) -> bool:
        """Whether held items are known: no live process, one that writes a status file, or
        a shared storage (holds stored)."""
        return self.live_pid is None or self._status is not None or self.shared

    @property
    def shared(self) -> bool:
        """Whether queues in this storage were used in shared mode (holds are stored)."""
        return self._stored_holds is not None or self._sessions is not None

    def file_size(self) -> int | None:
        """The size of the file, or of a shared storage as its server reports it."""
        if self.is_file:
            return os.path.getsize(self.path)
        try:
            return int(self._storage.getSize())
        except Exception:  # a storage that cannot tell
            return None

    def sessions(self) -> list[SessionInfo]:
        """The sessions of the processes sharing this storage, with how many items each holds."""
        if self._sessions is None:
            return []
        now = time.time()
        this_host = socket.gethostname()  # as sessions record it (shared/sessions.py)
        found = []
        for sid, record in self._sessions.items():
            record._p_activate()
            serial = getattr(record, "_p_serial", None)
            renewed = server_time(serial) if serial else None
            age = None if renewed is None else max(0.0, now - renewed)
            lease = float(getattr(record, "lease", 0.0))
            mine = self._stored_holds.get(sid) if self._stored_holds is not None else None
            host, pid = str(getattr(record, "host", "")), int(getattr(record, "pid", 0))
            found.append(SessionInfo(
                id=str(sid), host=host, pid=pid, lease=lease, renewed_age=age,
                lapsed=age is not None and age > lease, held=len(mine) if mine is not None else 0,
                process_gone=host == this_host and not process_running(pid),
            ))
        return found

    def live_size(self, progress: Progress | None = None) -> tuple[int, bool]:
        """Bytes of the current revision of every object (about the size after a pack).

        Exact up to ``LIVE_SAMPLE`` objects; beyond, estimated from a random sample of them,
        so that a big queue's stats stay quick. Returns ``(bytes, exact)``.
        """
        index = getattr(self._storage, "_index", None)
        if index is None:  # not a FileStorage: estimate from the size the storage reports
            return self.file_size() or 0, False
        oids = list(index.keys())
        exact = len(oids) <= LIVE_SAMPLE
        chosen = oids if exact else random.sample(oids, LIVE_SAMPLE)
        total = 0
        for n, oid in enumerate(chosen, 1):
            try:
                data, _tid = self._storage.load(oid)
            except Exception as exc:
                why = damage_of(self._storage.load, oid)
                if why is None:
                    raise
                raise DamagedFileError(
                    damaged_message(self.path, f"record {oid_repr(oid)} {why}")
                ) from exc
            total += len(data)
            if progress is not None and n % 10_000 == 0:
                progress(n, len(chosen))
        return (total if exact else total * len(oids) // len(chosen)), exact

    def stats(self, name: str, progress: Progress | None = None) -> QueueStats:
        """Counts by state from stored counters and indexes, without reading every entry.

        The age of the oldest ready item comes from the first ``OLDEST_SCAN`` entries in
        delivery order (exact when the queue is no longer than that, or FIFO without
        priorities, where the head is the oldest).
        """
        record = self.record(name)
        now = time.time()
        stored = stored_count(record)
        delayed = self._delayed_keys(record, now)
        held_keys = self.held_keys(name)
        # The status file may be a second older than the storage read: count only holds
        # whose items are still stored (one acked since then is gone from both views).
        held_items = [h for h in self._held_items(name, now) if _still_stored(record, h.key)]
        held = len(held_items) if self.holds_known else None
        oldest: float | None = None
        scanned = 0
        for key, entry in self.stored_entries(record, progress, min(stored, OLDEST_SCAN)):
            if scanned >= OLDEST_SCAN:
                break
            scanned += 1
            if repr(key) in delayed or (held_keys is not None and repr(key) in held_keys):
                continue
            oldest = entry.put_at if oldest is None else min(oldest, entry.put_at)
        return QueueStats(
            name=name,
            kind=str(record.kind),
            stored=stored,
            ready=None if held is None else max(0, stored - len(delayed) - held),
            held=held,
            delayed=len(delayed),
            dead=record.dead_count(),
            oldest_ready_age=None if oldest is None else max(0.0, now - oldest),
            oldest_ready_exact=scanned >= stored,
            held_items=held_items,
            paused=self.paused(name),
            serializer=str(record.serializer),
            seen=seen_count(record, now),
        )

    def paused(self, name: str) -> bool:
        """Whether queue ``name`` is paused (stored, so every process and reader sees it)."""
        return bool(self.record(name).paused)

    def _delayed_keys(self, record: QueueRecord, now: float) -> set[str]:
        """The reprs of the keys not yet due: a PriorityAckQueue's keys hold its items, which
        need not be hashable, so the keys themselves cannot go in a set."""
        index = record.delayed
        if index is None:
            return set()
        return {repr(key) for key, when in index.items() if when > now and record.has_entry(key)}

    @property
    def holds_age(self) -> float | None:
        """How old the live process's report of its holds is, in seconds (None: no report)."""
        if self._status is None:
            return None
        return max(0.0, time.time() - float(self._status.get("written_at", 0)))

    def peek(self, name: str, count: int, limit: int | None = 200, for_json: bool = False,
             progress: Progress | None = None) -> list[StoredItem]:
        """The first ``count`` stored items in delivery order, each with its state; items as
        JSON values where they have one with ``for_json`` (see ``shown_item``)."""
        record = self.record(name)
        now = time.time()
        held_keys = self.held_keys(name) or set()
        paused = self.paused(name)
        serializer = str(record.serializer)
        found: list[StoredItem] = []
        if count <= 0:
            return found
        for key, entry in self.stored_entries(record, progress, min(count, stored_count(record))):
            due = float(entry.not_before or 0)
            state = (
                "delayed" if due > now
                else "held" if repr(key) in held_keys else "ready"
            )
            if isinstance(entry, UnreadableEntry):
                item, is_repr, truncated = f"<unreadable: {entry.error}>", True, False
            else:
                item, is_repr, truncated = shown_item(entry.data, limit, for_json, serializer)
            found.append(StoredItem(
                position=repr(key), item=item, item_is_repr=is_repr,
                put_age=max(0.0, now - entry.put_at),
                attempts=entry.attempts, state=state, queue_paused=paused,
                key=_user_key(entry), group=entry.group,
                due_in=due - now if due > now else None, size=len(entry.data),
                item_truncated=truncated,
            ))
            if len(found) >= count:
                break
        return found

    def dead(self, name: str, limit: int | None = 200, for_json: bool = False) -> list[DeadItem]:
        record = self.record(name)
        tree = record.dead
        if tree is None:
            return []
        serializer = str(record.serializer)
        return [dead_item(key, letter, limit, for_json, serializer)
                for key, letter in edge_loaded(tree).items()]

    # -- holds, from the live process's status file ---------------------------------------------

    def _fresh_status(self) -> dict[str, Any] | None:
        if self.live_pid is None:
            return None
        status = read_status(self.path)
        if status is None or status.get("pid") != self.live_pid:
            return None  # none yet, or left behind by an earlier, killed process
        return status

    def _held_raw(self, name: str) -> list[dict[str, Any]]:
        """Holds of queue ``name`` as dicts: the stored ones (shared mode) and those a live
        process reported in its status file (its in-memory holds), each held item once."""
        held = self._stored_held(name)
        if self._status is not None:
            queue = self._status.get("queues", {}).get(name, {})
            stored = {h["key"] for h in held}
            held += [h for h in queue.get("held", []) if h.get("key") not in stored]
        return held

    def _stored_held(self, name: str) -> list[dict[str, Any]]:
        """Holds of queue ``name`` stored in shared mode: session -> {(queue, key): token}."""
        if self._stored_holds is None:
            return []
        record: QueueRecord | None = self._queues.get(name)
        held = []
        for sid, mine in self._stored_holds.items():
            for (queue_name, key), token in mine.items():
                if queue_name != name or record is None:
                    continue
                entry = record.entry(key)
                if entry is None or holder(entry) != (sid, token):
                    continue  # settled, or taken over, since it was listed
                held.append({"owner": sid, "id": token, "attempts": entry.attempts,
                             "got_at": None, "key": repr(key)})
        return held

    def held_keys(self, name: str) -> set[str] | None:
        return {h["key"] for h in self._held_raw(name)} if self.holds_known else None

    def _held_items(self, name: str, now: float) -> list[HeldItem]:
        return [
            HeldItem(owner=h["owner"], delivery_id=h["id"], attempts=h["attempts"],
                     age=None if h.get("got_at") is None else max(0.0, now - h["got_at"]),
                     key=h["key"])
            for h in self._held_raw(name)
        ]

    def stored_entries(
        self, record: QueueRecord, progress: Progress | None, total: int
    ) -> Iterator[tuple[Any, StoredEntry | UnreadableEntry]]:
        """Stored entries not yet acked (see :func:`readable_entries`); ``progress`` every
        10,000; flat memory on big queues."""
        for n, pair in enumerate(readable_entries(record), 1):
            yield pair
            if progress is not None and n % 10_000 == 0:
                progress(n, total)
            if n % 1_000 == 0:
                self._conn.cacheGC()  # keep memory flat on big queues


def _user_key(entry: Any) -> str | None:
    """The key an entry was put with (put(key=)), as given; a bytes key as its repr."""
    indexed = entry.item_key
    if indexed is None:
        return None
    key = shown_key(indexed)
    return key if isinstance(key, str) else repr(key)


def _still_stored(record: QueueRecord, key_repr: str) -> bool:
    try:
        key = ast.literal_eval(key_repr)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return True  # a key we cannot rebuild: trust the live process's report
    try:
        return record.has_entry(key)
    except TypeError:
        return True
