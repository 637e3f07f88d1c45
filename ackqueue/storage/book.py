"""The book of one named queue: its stored record, the edits that change it, the reads that
see it.

Edits are functions run inside ``Store.run`` that touch only the database, so that a group
commit may apply them again after a conflict. Each checks what it needs before it changes
anything, because a failing change is committed with its batch.

The writer connection belongs to the group committer; reads go through the book's
:class:`Reader`, a connection of its own, moved up to the latest commit before each read,
whose reads are tried again when a pack or a server restart cuts them. Callers serialise
them (the queue holds its mutex), which is what makes one connection safe to share between
threads.

The book's groups (``put(item, group=)``) are stored on their entries: functions below read
every grouped entry, pause a group and remove a group's entries. Entries that shared-mode acks
marked done are deleted in batches by :func:`sweep_done`, inside a change on any connection
(the shared sweeper's own, or the writer's when a plain open deletes what shared mode left;
see :mod:`ackqueue.shared.sweeping`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, Protocol, TypeVar

from ZODB.Connection import Connection
from ZODB.POSException import ReadConflictError

from ackqueue.base.clock import Clock
from ackqueue.errors import (
    AckQueueError,
    DamagedFileError,
    ItemLoadError,
    NotAQueueFileError,
    SerializerMismatchError,
    StorageError,
    StorageUnreachableError,
    damaged_message,
)
from ackqueue.records import (
    FORMAT_VERSION,
    QUEUE_KINDS,
    ROOT_KEY,
    InlineEntry,
    QueueRecord,
    a_byte_apart,
    edge_loaded,
    garbled_root_key,
    loads,
    queues_of,
    unsafe_record,
    unsafe_record_named,
)
from ackqueue.storage.counts import count_change, stored_count
from ackqueue.storage.deadletters import DeadLetter, bury, listed
from ackqueue.storage.failures import abort_quietly, connection_lost, storage_failed
from ackqueue.storage.filestorage import transactions_damage
from ackqueue.storage.items import JSON, PICKLE, PICKLE_CODEC, Codec, Staged
from ackqueue.storage.keys import release
from ackqueue.storage.store import Store

T = TypeVar("T")

SERIALIZERS = (PICKLE, JSON)  # the names of ackqueue's own serializers

# What settling a held entry does to it: delete (ack), bury (dead letters), delay (a nack with
# a delay: a new due time). A nack without delay stores nothing.
# A snooze is a delay that also gives back the delivery's attempt (c.snooze()).
Settlement = Literal["delete", "bury", "delay", "snooze", "rewrite"]


class Keeping(Protocol):
    """How a book keeps its count and retires acked entries: one writer process does it one
    way, several another, so the queue's mode supplies it (each mode module has its own)."""

    def opened(self, book: Book, record: QueueRecord) -> None:
        """The record was found or made (inside the opening change): start keeping it."""
        ...

    def retire(self, book: Book, key: Any) -> None:
        """An acked entry leaves the queue (inside a change); its count drops at once."""
        ...

    @property
    def own_records(self) -> bool:
        """Whether each new entry is a record of its own (holds and acks are marked on it, so
        that processes working on different items change different objects) rather than
        inline in its tree bucket (see ackqueue/records.py)."""
        ...


class Book:
    """The stored state of queue ``name`` in ``store``'s database.

    ``kind`` is the queue kind the record must have (``fifo``, ``lifo``, ``priority``);
    ``keeping`` is how the queue's mode keeps its count and retires acked entries.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        kind: str,
        class_name: str,
        keeping: Keeping,
        codec: Codec = PICKLE_CODEC,
    ) -> None:
        self.store = store
        self.codec = codec  # the serializer of the items, as the record names it
        self.name = name
        self._kind = kind
        self._class_name = class_name
        self._keeping = keeping
        self.clock: Clock = time.time  # the queue's (set at open): when a key was seen
        # The writer connection's record: read and changed only inside a change.
        self.record: QueueRecord = store.run(self._find_or_create)
        self._reader = Reader(store, name)

    def _find_or_create(self) -> QueueRecord:
        store = self.store
        root = store.root()
        queues = queues_of(root, create=False)
        garbled = garbled_root_key(root) if queues is None else None
        if garbled is not None:
            raise DamagedFileError(damaged_message(
                store.where, f"its root names {garbled!r} where ackqueue wrote {ROOT_KEY!r}"
            ))
        if queues is None and store.owns_db and len(root):
            raise NotAQueueFileError(
                f"{store.where} holds a ZODB database that is not an ackqueue file "
                f"(its root has {sorted(root)[:5]!r})"
            )
        queues = queues_of(root, create=True)
        record: QueueRecord | None = queues.get(self.name)
        if record is None:
            listed = next((key for key, other in queues.items() if other.name == self.name), None)
            if listed is not None:
                raise DamagedFileError(damaged_message(store.where, (
                    f"queue {self.name!r} is listed as {listed!r}: the name in its list of "
                    "queues is damaged"
                )))
            record = queues[self.name] = QueueRecord(
                self._kind, self.codec.name, self.name, sharded=self._keeping.own_records
            )
        elif record.format_version > FORMAT_VERSION:
            raise NotAQueueFileError(
                f"queue {self.name!r} in {store.where} was written in format "
                f"{record.format_version} by a newer ackqueue; this one reads formats up to "
                f"{FORMAT_VERSION}. If no newer ackqueue wrote to it, "
                + damaged_message(store.where, "its format number was changed")
            )
        elif record.kind not in QUEUE_KINDS:
            raise DamagedFileError(damaged_message(
                store.where, f"queue {self.name!r} is of kind {record.kind!r}, which none is"
            ))
        elif record.kind != self._kind:
            raise NotAQueueFileError(
                f"queue {self.name!r} in {store.where} was made by a {record.kind} queue "
                f"class, not {self._class_name}"
            )
        elif record.serializer != self.codec.name:
            # A byte away from ackqueue's own serializers' names only: a caller's own names
            # are versioned ("codec-v1", "codec-v2") and may well be a byte apart.
            meant = next((own for own in SERIALIZERS
                          if a_byte_apart(str(record.serializer), own)), None)
            if meant is not None:
                raise DamagedFileError(damaged_message(store.where, (
                    f"queue {self.name!r} names its serializer {record.serializer!r}, which "
                    f"is {meant!r} damaged"
                )))
            raise SerializerMismatchError(
                f"queue {self.name!r} in {store.where} holds items encoded with serializer "
                f"{record.serializer!r}, not {self.codec.name!r}: open it with "
                f"serializer={record.serializer!r}"
            )
        self._keeping.opened(self, record)
        return record

    def close(self) -> None:
        """Close the reader connection (the record stays, of course)."""
        self._reader.close()

    # -- reads (the caller serialises them) -----------------------------------------------

    def read(self, read: Callable[[QueueRecord], T]) -> T:
        """``read(record)`` on the reader connection, moved up to the latest commit first
        (see :meth:`Reader.read`)."""
        return self._reader.read(read)

    def check_entries(self) -> None:
        """Raise :class:`~ackqueue.DamagedFileError` if the stored entry tree is out of order,
        or the file's chain of transactions (whose records the count is folded from) is
        broken: called where what was read at open and what is stored now disagree."""
        why = self.read(lambda record: record.entry_damage())
        if why is not None:
            why = f"the entry tree of queue {self.name!r} {why}"
        elif self.store.file_path is not None:  # the count is folded from the transactions
            why = transactions_damage(self.store.file_path)
        if why is not None:
            raise DamagedFileError(damaged_message(self.store.where, why))

    def catch_up(self) -> None:
        """Move the reader to the latest commit of any process (shared mode's refresh)."""
        self._reader.catch_up()

    @property
    def read_record(self) -> QueueRecord:
        """The reader's record as of the last read: for reading on from where a read left
        off (read-ahead, counting), by the caller that serialises reads."""
        return self._reader.record

    def read_root(self) -> Any:
        """The reader connection's database root as of the last read."""
        return self._reader.root()

    def load(self, key: Any) -> tuple[bytes, int]:
        """The stored pickle and attempts of ``key`` (KeyError if it is not stored)."""

        def read(record: QueueRecord) -> tuple[bytes, int]:
            entry = record.entry_at(key)
            try:
                if entry.done:
                    raise KeyError(key)  # acked in shared mode, not swept yet
                record.vouch(key, entry)
                return entry.data, entry.attempts
            except Exception as exc:
                unsafe = unsafe_record(exc)
                if unsafe is None:
                    raise
                raise ItemLoadError(
                    f"cannot load item {key!r} of queue {self.name!r}: "
                    f"{unsafe_record_named(entry, unsafe)}"
                ) from exc

        return self.read(read)

    def put_at(self, key: Any) -> float:
        """When entry ``key`` was put (the queue's clock); KeyError if it is not stored."""
        return self.read(lambda record: float(record.entry_at(key).put_at))

    def paused(self) -> bool:
        """Whether the queue is paused (:meth:`pauser`)."""
        return self.read(lambda record: bool(record.paused))

    def count(self) -> int:
        """How many entries are stored (ready, delayed or held)."""
        return self.read(stored_count)

    def seq_reserved(self) -> int:
        """The sequence numbers below this one may be in use."""
        return self.read(lambda record: int(record.seq_reserved))

    def delayed_at_open(self) -> list[tuple[Any, float]]:
        """Every entry of the stored delay index with its due time, each checked against the
        due time its entry keeps: a changed byte in either would otherwise hand the item out
        early, or hold it back for years (a DamagedFileError names both)."""

        def read(record: QueueRecord) -> list[tuple[Any, float]]:
            index = record.delayed
            delayed = list(edge_loaded(index).items()) if index is not None else []
            for key, due in delayed:
                entry = record.entry(key)
                if entry is not None and not loads(entry):
                    continue  # a crafted record: the get that reaches it dead-letters it
                if entry is None or (not entry.done and entry.not_before != due):
                    kept = "no entry is stored" if entry is None else (
                        f"its entry keeps {entry.not_before!r}"
                    )
                    raise DamagedFileError(damaged_message(self.store.where, (
                        f"the delay index of queue {self.name!r} says entry {key!r} is due "
                        f"at {due!r}, but {kept}"
                    )))
            return delayed

        return self.read(read)

    def dead_letters(self) -> list[DeadLetter]:
        def read(record: QueueRecord) -> list[DeadLetter]:
            dead = record.dead
            stored = list(edge_loaded(dead).items()) if dead is not None else []
            return [listed(dead_id, rec, self.codec) for dead_id, rec in stored]

        return self.read(read)

    def dead_count(self) -> int:
        return self.read(lambda record: record.dead_count())

    def dead_keys(self, ids: list[int] | None) -> list[tuple[int, Any]]:
        """``(dead-letter id, old entry key)`` of the chosen dead letters (all with None)."""

        def read(record: QueueRecord) -> list[tuple[int, Any]]:
            dead = record.dead
            if dead is None:
                return []
            if ids is None:
                chosen = list(edge_loaded(dead).keys())
            else:
                chosen = [i for i in ids if i in dead]
            return [(dead_id, dead[dead_id].key) for dead_id in dict.fromkeys(chosen)]

        return self.read(read)

    # -- edits (run inside Store.run; they touch only the database) ------------------------

    def store_entry(
        self,
        staged: Staged,
        now: float,
        item_key: bytes | None = None,
        remember: float | None = None,
    ) -> None:
        """Store a staged put's entry (inside a change; the count is the caller's), put by
        ``item_key`` if given; inline unless the queue's mode keeps entries as records."""
        record = self.record
        record.new_entry(
            staged.key, staged.data, now, staged.not_before, staged.group,
            item_key=item_key, remember=remember, own_record=self._keeping.own_records,
        )
        if staged.not_before:
            record.delay_index()[staged.key] = staged.not_before
        if staged.group is not None and not record.grouped:
            record.mark_grouped()

    def inserter(self, batch: list[Staged], now: float) -> Callable[[], None]:
        record = self.record

        def insert() -> None:
            for staged in batch:
                self.store_entry(staged, now)
            count_change(record, len(batch))
            record.reserve_seq(max(staged.seq for staged in batch))

        return insert

    def deleter(
        self, keys: list[Any], check: bool = False, done: bool = True
    ) -> Callable[[], None]:
        """The edit deleting entries ``keys`` (``check``: each must be stored); ``done``: they
        were handed out, so keys put to be remembered go to the seen-set (a removal frees
        them instead: see :meth:`remove_entry`)."""
        require = self.require_stored(keys)

        def delete() -> None:
            if check:
                require()
            for key in keys:
                self.remove_entry(key, done=done)

        return delete

    def require_stored(self, keys: list[Any]) -> Callable[[], None]:
        record, name = self.record, self.name  # attributes read inside the change

        def require() -> None:
            for key in keys:
                if not record.has_entry(key):
                    raise AckQueueError(f"entry {key!r} of queue {name!r} is not stored")

        return require

    def remove_entry(self, key: Any, done: bool = True) -> None:
        """Delete entry ``key`` (inside a change). ``done``: the item was acked or handed out
        by a plain get, so a key it was put with to be remembered goes to the seen-set."""
        record = self.record
        if record.keyed is not None:
            release(record, key, record.entry_at(key), self.clock() if done else None)
        inline = record.drop_entry(key)
        if inline is None:
            self.store.note_dropped(1)  # the entry's own record is garbage now
        else:
            self.store.note_dropped(0, inline)
        count_change(record, -1)

    def retire_entry(self, key: Any) -> None:
        """An acked entry leaves the queue (inside a change), the way the mode keeps entries."""
        self._keeping.retire(self, key)

    def sweeper(self, scan: int | None) -> Callable[[], int]:
        """The edit deleting entries marked done among the first ``scan`` keys (all with
        None); it returns how many it deleted. The count dropped when each was marked."""
        record = self.record

        def sweep() -> int:
            swept = sweep_done(record, scan)
            self.store.note_dropped(swept)
            return swept

        return sweep

    def bury(self, key: Any, reason: str, now: float, attempts: int | None) -> int:
        """Move entry ``key`` to the dead letters (inside a change)."""
        return bury(self.record, key, reason, now, attempts)

    def settler(
        self,
        plan: list[tuple[Any, Settlement, str, int]],
        due: float,
        now: float,
        data: bytes | None = None,
    ) -> Callable[[], None]:
        """The edit settling held entries: ``(key, settlement, reason, attempts)`` each;
        ``data``: the new pickle of every entry given back or buried (``nack(replace=)``;
        ``rewrite`` gives an entry back with only that)."""
        record = self.record

        def edit() -> None:
            for key, settlement, reason, attempts in plan:
                if data is not None and settlement != "delete":
                    record.change_entry(key, data=data)
                if settlement == "rewrite":
                    continue
                if settlement == "delete":
                    self.retire_entry(key)
                elif settlement == "bury":
                    bury(record, key, reason, now, attempts)
                else:
                    attempts = record.entry_at(key).attempts
                    if settlement == "snooze" and attempts > 0:
                        record.change_entry(key, not_before=due, attempts=attempts - 1)
                    else:
                        record.change_entry(key, not_before=due)
                    if due:
                        record.delay_index()[key] = due
                    elif record.delayed is not None:  # a snooze of no time: ready now
                        record.delayed.pop(key, None)  # (a delay it was got after, if kept)

        return edit

    def attempt_recorder(
        self, keys: list[Any], limit: int | None, reason: str, clock: Callable[[], float]
    ) -> Callable[[], list[int | None]]:
        """The edit counting one more delivery of each key; a key out of attempts is buried
        instead (its count is None)."""
        record = self.record

        def record_attempts() -> list[int | None]:
            counts: list[int | None] = []
            now = clock()
            for key in keys:
                try:
                    entry = record.entry_at(key)
                except KeyError as exc:
                    # One this process found in the tree at open: a lookup that misses it now
                    # is a damaged tree, or a bug to let out as it is.
                    why = record.entry_damage()
                    if why is None:
                        raise
                    raise DamagedFileError(damaged_message(
                        self.store.where, f"the entry tree of queue {self.name!r} {why}"
                    )) from exc
                if limit is not None and entry.attempts >= limit:
                    bury(record, key, reason, now, entry.attempts)
                    counts.append(None)
                else:
                    attempts = entry.attempts + 1
                    record.change_entry(key, attempts=attempts)
                    counts.append(attempts)
            return counts

        return record_attempts

    def requeuer(self, fresh: dict[int, Staged]) -> Callable[[], list[Staged]]:
        """The edit moving dead letters back into the queue under their new keys."""
        record = self.record

        def requeue() -> list[Staged]:
            moved = []
            for dead_id, staged in fresh.items():
                letter = record.dead.get(dead_id) if record.dead is not None else None
                if letter is None:
                    continue
                del record.dead[dead_id]
                record.dead_length.change(-1)
                record.new_entry(
                    staged.key, letter.data, letter.put_at, group=letter.group,
                    own_record=self._keeping.own_records,
                )
                staged.group = letter.group
                count_change(record, 1)
                record.reserve_seq(staged.seq)
                moved.append(staged)
            return moved

        return requeue

    def purger(self, ids: Iterable[int] | None) -> Callable[[], int]:
        """The edit deleting dead letters for good (all with None); it returns how many."""
        record = self.record
        wanted = None if ids is None else list(ids)

        def purge() -> int:
            dead = record.dead
            if dead is None:
                return 0
            if wanted is None:
                doomed = list(edge_loaded(dead).keys())
            else:
                doomed = [i for i in dict.fromkeys(wanted) if i in dead]
            for dead_id in doomed:
                del dead[dead_id]
            record.dead_length.change(-len(doomed))
            return len(doomed)

        return purge

    def pauser(self, paused: bool) -> Callable[[], None]:
        """The edit pausing the queue (or resuming it, with False)."""
        return functools.partial(self.record.set_paused, paused)

    def seq_reserver(self, block: int) -> Callable[[], int]:
        """The edit reserving ``block`` sequence numbers for this process; it returns the first."""
        record = self.record

        def reserve() -> int:
            # Aligned to a block: a block of shared mode's is one shard (records.py).
            start: int = -(-record.seq_reserved // block) * block
            record.seq_reserved = start + block
            return start

        return reserve


READ_RETRIES = 5


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
        """Called with a :func:`storage_failed` error only."""
        return StorageUnreachableError(f"cannot read queue storage {self._store.where}: {exc!r}")

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


def has_groups(book: Book) -> bool:
    """Whether an entry was ever put with a group (see :mod:`ackqueue.delivery.groups`)."""
    return book.read(lambda record: bool(record.grouped))


def grouped_entries(book: Book) -> list[tuple[Any, str, bool]]:
    """``(key, group, delayed)`` of every stored entry that has a group (reads them all)."""

    def read(record: QueueRecord) -> list[tuple[Any, str, bool]]:
        if not record.grouped:
            return []
        delayed = record.delayed if record.delayed is not None else {}
        return [(key, group, key in delayed) for key, group in record.entry_groups()]

    return book.read(read)


def group_pauses(book: Book) -> dict[str, float]:
    """Every paused group with the time its pause ends."""

    def read(record: QueueRecord) -> dict[str, float]:
        pauses = record.group_pauses
        return dict(edge_loaded(pauses).items()) if pauses is not None else {}

    return book.read(read)


def group_pauser(book: Book, group: str, until: float) -> Callable[[], None]:
    """The edit pausing ``group`` until ``until`` (a time in the past resumes it)."""
    record = book.record

    def set_pause() -> None:
        record.set_pause(group, until if until > 0 else None)

    return set_pause


def group_pause_raiser(book: Book, group: str, until: float) -> Callable[[], float | None]:
    """The edit pausing ``group`` until ``until`` at least (a longer pause stays); it returns
    the pause it found (None: not paused)."""
    record = book.record

    def pause() -> float | None:
        found = record.paused_until(group)
        if found is None or found < until:
            record.set_pause(group, until)
        return found

    return pause


def group_pause_restorer(book: Book, group: str, set_to: float, back_to: float | None
                         ) -> Callable[[], None]:
    """The edit putting ``group``'s pause back to ``back_to`` (None: not paused), if it is
    still ``set_to`` (another process may have paused it since)."""
    record = book.record

    def restore() -> None:
        if record.paused_until(group) == set_to:
            record.set_pause(group, back_to)

    return restore


def group_settings(book: Book) -> dict[str, tuple[int | None, float | None]]:
    """Every group's own settings (``q.set_group``): ``(max_held, interval)``."""

    def read(record: QueueRecord) -> dict[str, tuple[int | None, float | None]]:
        settings = record.group_settings
        return dict(edge_loaded(settings).items()) if settings is not None else {}

    return book.read(read)


def group_setter(
    book: Book, group: str, setting: tuple[int | None, float | None]
) -> Callable[[], None]:
    """The edit storing ``group``'s own settings (both None: the queue's options again)."""
    record = book.record

    def set_group() -> None:
        settings = record.group_setting_index()
        if setting != (None, None):
            if settings.get(group) != setting:
                settings[group] = setting
        elif group in settings:
            del settings[group]

    return set_group


def group_remover(
    book: Book, group: str, holder: Callable[[Any], object]
) -> Callable[[], int]:
    """The edit removing every stored entry of ``group`` that no process holds; it returns
    how many. Shared mode marks holds on the entries, and ``holder(entry)``, asked inside the
    edit, says who holds it (None: nobody, or a void hold)."""
    record = book.record

    def remove() -> int:
        if not record.grouped:
            return 0
        doomed = [
            key
            for key, entry in record.entry_items()
            if loads(entry) and entry.group == group and not entry.done and holder(entry) is None
        ]
        for key in doomed:
            record.fence_entry(key)  # conflicts with a take racing it
            book.remove_entry(key, done=False)  # a removed item's key is free, not seen
        return len(doomed)

    return remove


def sweep_done(record: QueueRecord, scan: int | None, gap: int | None = None) -> int:
    """Delete the entries marked done among the first ``scan`` keys of ``record`` (all with
    None), inside a change on any connection; return how many. With ``gap``, stop after that
    many entries in a row that nobody holds and that are not done: the consumers have not
    come that far (held entries are where they are working, and do not end the look).

    Every entry looked at is loaded, and one not looked at before is loaded for the first time
    (a round trip to a server in shared mode), only to be loaded again once it is done: the
    look ahead of the consumers is kept to ``gap`` entries, loaded ``gap`` at a time."""
    doomed = []
    free = 0
    for chunk in chunks(record.entry_items(), scan, gap or PREFETCH):
        for key, entry in chunk:
            if entry.done:
                doomed.append(key)
                free = 0
            elif getattr(entry, "holder", None) is None:
                free += 1
        if gap is not None and free >= gap:
            break
    for key in doomed:
        record.drop_entry(key)
    record.retire_empty_shards()
    return len(doomed)


PREFETCH = 64


def chunks(
    items: Iterable[tuple[Any, Any]], limit: int | None, size: int = PREFETCH
) -> Iterator[list[tuple[Any, Any]]]:
    """``(key, entry)`` pairs in chunks, the entries of each loaded in one go (at most
    ``limit`` pairs in all; None: every one).

    Each entry that is a record of its own is loaded from the server when first touched: one
    round trip each, one after another. Asking for a chunk at once (``Connection.prefetch``; ZEO
    sends the loads together, FileStorage ignores it) makes that about one round trip."""
    chunk: list[tuple[Any, Any]] = []
    for n, pair in enumerate(items):
        if limit is not None and n >= limit:
            break
        chunk.append(pair)
        if len(chunk) >= size:
            yield _loaded(chunk)
            chunk = []
    if chunk:
        yield _loaded(chunk)


def _loaded(chunk: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    # Only ghosts: a prefetch goes through the ZEO client's IO thread for every object named,
    # loaded already or not (a look past many entries loaded before paid that at every look).
    records = [entry for _, entry in chunk
               if not isinstance(entry, InlineEntry) and entry._p_changed is None]
    jar = records[0]._p_jar if records else None
    if jar is not None and _connected(jar):
        jar.prefetch(records)
    return chunk


def _connected(jar: Connection) -> bool:
    """False when the storage is a ZEO client cut off from its server: its prefetch would then
    fail in the client's IO thread, where nobody waits for it, and ZEO logs each such failure
    with a traceback when the garbage collector finds it (a page of noise for every chunk read
    while the server restarts; the loads themselves then wait or fail as usual)."""
    is_connected = getattr(jar.db().storage, "is_connected", None)
    return is_connected is None or bool(is_connected())
