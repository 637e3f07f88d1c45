"""How many entries a queue stores, kept off the per-operation commits of a queue file.

Every put and ack changes the count. Kept in a ``BTrees.Length`` written by each commit, it is
one more object to pickle and store per commit, a tenth of a put's work. So a queue opened
from a file (one process, one writer) instead records each commit's change of its count in
the commit's own transaction metadata (``Transaction.setExtendedInfo``: a few bytes in the
transaction header), and writes the ``Length`` only every :data:`FOLD_EVERY` commits, before
a pack, and when the queue is closed ("folding"). The exact count is then::

    length() + the changes recorded by the transactions after the Length's own revision

which a reader finds by iterating the storage's transactions after that revision (the last
fold: a few hundred at most, or since the queue was opened). The record says whether its
count is kept this way (``QueueRecord.counted_in_log``), so that every other reader (a
shared-mode process over ZEO, ``ackqueue stats`` opening the file read-only, an opener after a
``kill -9``) knows to add the recorded changes; the next opener of the file folds them for good.
A queue's count is deferred from the first commit of the session that changes it (that commit
sets the flag and writes the ``Length``), not from its open, so that a session which changes
nothing (a consumer that finds nothing to do, a look at ``qsize``) writes nothing at all.

Each commit records its own change, also the one that folds (the folded ``Length`` includes
it, and a reader starts after the ``Length``'s revision), so a reader that loaded an older
``Length`` still adds up to the right count.

Each commit that changes a count, and each fold, also records the count it leaves
(:data:`TOTALS_KEY`). No checksum covers transaction metadata, so an opener after an unclean
stop checks the chain before it trusts it: the fold's recorded count is the ``Length``, and each
later change added to it gives the count that commit recorded. A chain that holds is the count
(nothing else is read: reopening a million items after ``kill -9`` reads a few hundred
transaction headers); one that does not (a changed byte, a file from before counts were
recorded) is recounted from the entries and put right, with a warning. A clean close records
the count it writes to the ``Length`` as well, and every open checks a ``Length`` against the
count its own commit recorded.

A pack drops transactions whose records were all replaced; the store folds every queue it
defers and packs only up to that fold (see :meth:`LogCounts.fold_for_pack`), so no dropped
transaction is still needed.

Deletions of entries go the same way (the :class:`~ackqueue.records.EntryLog` of a queue whose
count is deferred): an ack, a plain get or a removal of an entry of one tree with no due time
records the entry's key in its commit's metadata (:data:`DROPS_KEY`, with a checksum of the
keys) instead of deleting it from its tree bucket, so that commit stores no object at all (a
bucket rewrite pickles its sixteen entries again, most of an ack's work). A fold deletes the
recorded entries from the tree, in the same commit as it writes the Length; until then every
read of the record leaves them out: the writer's and the store's readers from memory
(:class:`LogCounts`), another process (``ackqueue stats``/``peek``, salvage) and an opener
after a crash by reading the deletions recorded after the Length's revision, as for the count
(:func:`logged_drops`; an opener then makes them in the tree). An opener that cannot read them
back whole raises :class:`~ackqueue.DamagedFileError` rather than hand out items whose ack
returned; another process's read passes over what it cannot read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from persistent.TimeStamp import TimeStamp
from ZODB.utils import p64, u64

from ackqueue.errors import DamagedFileError, damaged_message
from ackqueue.records import LOGGED_DROPS_FORMAT, EntryLog, QueueRecord, queues_of

log = logging.getLogger("ackqueue")

COUNTS_KEY = "ackqueue.counts"  # transaction metadata: {queue name: change of its count}
TOTALS_KEY = "ackqueue.totals"  # transaction metadata: {queue name: its count after the commit}
FOLD_EVERY = 512  # commits between folds: what a reader or an opener after a crash scans
# Transaction metadata: {queue name: [checksum of the keys, key, ...]}, the entries the commit
# deleted (see the module docstring).
DROPS_KEY = "ackqueue.drops"
MAX_LOGGED_DROPS = 2048  # in one commit (metadata is at most 64 KB); more are deleted at once
FOLD_DROPS = 4096  # deletions waiting for the tree that fold their queue (a fold's commit size)
KEEP_FOLDS = 2  # folds a deletion made in the tree is still left out of reads for
PACK_TIME_GAP = 1e-5  # seconds between two folds that a pack time can fall between
IN_FLIGHT, LOGGED = -1, 0  # LogCounts._hidden: being committed; committed, not in the tree yet


def drops_checksum(keys: list[Any]) -> int:
    return zlib.crc32(repr(keys).encode())


class _Hidden:
    """The keys the writer's change sees deleted: committed ones and its own."""

    __slots__ = ("logged", "staged")

    def __init__(self, logged: dict[Any, int], staged: dict[Any, None]) -> None:
        self.logged, self.staged = logged, staged

    def __contains__(self, key: object) -> bool:
        return key in self.logged or key in self.staged

    def __iter__(self) -> Iterator[Any]:
        yield from list(self.logged)
        yield from list(self.staged)

    def __len__(self) -> int:
        return len(self.logged) + len(self.staged)


class _Reading:
    """The entry log as the store's other connections see it: the deletions committed (or
    being committed) and not yet made in the tree, and those made in the last folds (a
    reader may still be at an older view)."""

    def __init__(self, counts: LogCounts) -> None:
        self._counts = counts

    def hidden(self, oid: bytes) -> Collection[Any]:
        return self._counts.hidden_committed(oid)

    def drop(self, record: QueueRecord, key: Any) -> bool:
        return False  # only the writer changes anything


class LogCounts:
    """The counts of the queues of one file-storage database, deferred to transaction metadata.

    ``run`` is the store's ``run`` (a change committed through the group committer); the
    hooks :meth:`begin`, :meth:`before_commit` and :meth:`committed` are called by the group
    committer around each commit attempt, in the thread making it.
    """

    def __init__(self, storage: Any, writer: Any, tm: Any) -> None:
        self._storage = storage
        self._writer = writer
        self._tm = tm
        self._names: dict[bytes, str] = {}  # record oid -> queue name, for queues deferring
        self._waiting: dict[bytes, str] = {}  # the same, for queues opened but not changed yet
        self._starting: dict[bytes, str] = {}  # records that start deferring in this commit
        self._pending: dict[bytes, int] = {}  # committed changes not yet in the Length
        self._txn: dict[bytes, int] = {}  # changes in the commit being made
        self._fold: set[bytes] = set()  # records to fold in the commit being made
        self._stopped: dict[bytes, str] = {}  # records that stop deferring in this commit
        self._since_fold = 0
        self._fold_all = False
        self.fold_tid: bytes | None = None  # the transaction of the last fold of everything
        self._lock = threading.Lock()
        # Entry deletions (the EntryLog): those of the commit being made, record oid -> keys;
        # and those committed or being committed, oid -> key -> IN_FLIGHT, LOGGED or the
        # number of the fold that made it in the tree (forgotten KEEP_FOLDS folds later).
        self._drops: dict[bytes, dict[Any, None]] = {}
        self._hidden: dict[bytes, dict[Any, int]] = {}
        self._in_flight: list[tuple[bytes, list[Any]]] = []
        self._unapplied: dict[bytes, int] = {}  # oid -> how many are LOGGED
        self._folds = 0
        self.reading: EntryLog = _Reading(self)

    # -- inside changes --------------------------------------------------------------------

    def defers(self, record: Any) -> bool:
        return record._p_oid in self._names and bool(record.counted_in_log)

    def keeps(self, record: Any) -> bool:
        """Whether ``record``'s changes go through :meth:`change`: it defers, or will from its
        first change on."""
        return self.defers(record) or record._p_oid in self._waiting

    def change(self, record: Any, n: int) -> None:
        oid = record._p_oid
        self._txn[oid] = self._txn.get(oid, 0) + n

    def start(self, record: Any, name: str) -> None:
        """Defer ``record``'s count from the first commit that changes it on (called inside
        the change opening it). Until then the Length holds the count and nothing is written:
        an open and close that change nothing append nothing to the file."""
        if record._p_oid is None:
            self._writer.add(record)  # a new queue: give it its oid now
        if not record.counted_in_log:
            self._waiting[record._p_oid] = name
            return
        self._names[record._p_oid] = name  # deferring already: no opener settled it
        self._fold.add(record._p_oid)  # anchors the Length at this commit: a short replay

    # -- the entry log (records.EntryLog, for the writer) ----------------------------------

    def hidden(self, oid: bytes) -> Collection[Any]:
        logged, staged = self._hidden.get(oid), self._drops.get(oid)
        if staged:
            return _Hidden(logged or {}, staged)
        return logged or ()

    def hidden_committed(self, oid: bytes) -> Collection[Any]:
        return self._hidden.get(oid) or ()

    def drop(self, record: QueueRecord, key: Any) -> bool:
        if not isinstance(key, int) or not self.keeps(record):
            return False
        staged = self._drops.setdefault(record._p_oid, {})
        if len(staged) >= MAX_LOGGED_DROPS:
            return False
        staged[key] = None
        return True

    def _apply_drops(self, oid: bytes) -> None:
        """Make every deletion of queue ``oid`` not yet made in its tree (inside the commit:
        this commit's own are IN_FLIGHT by now)."""
        logged = self._hidden.get(oid)
        keys = [key for key, state in (logged or {}).items() if state <= LOGGED]
        if keys:
            self._writer.get(oid).apply_logged_drops(keys)

    def forget(self, record: Any) -> None:
        """A queue closed before any change: nothing to fold (memory only)."""
        self._waiting.pop(record._p_oid, None)

    def stop(self, record: Any) -> None:
        """Fold ``record``'s count and keep it in the Length again (inside a change).

        Memory changes only once the commit is in (:meth:`committed`): a change may be
        applied again (a conflict, or another change of its group failing partway), and the
        second application must find what the first one did."""
        oid = record._p_oid
        record.length.change(self._pending.get(oid, 0) + self._txn.pop(oid, 0))
        record.counted_in_log = False
        self._fold.discard(oid)
        name = self._names.get(oid)
        if name is not None:
            self._stopped[oid] = name

    # -- the group committer's hooks -------------------------------------------------------

    def begin(self) -> None:
        self.aborted()  # a failed attempt's deletions are not deleted
        # New containers only when used: committed() keeps the ones it reads as they are.
        if self._drops:
            self._drops = {}
        if self._txn:
            self._txn = {}
        if self._starting:
            self._starting = {}
        if self._fold:
            self._fold = set()
        if self._stopped:
            self._stopped = {}

    def before_commit(self) -> None:
        txn, names, pending = self._txn, self._names, self._pending
        record_info = self._tm.get().setExtendedInfo
        changed = [(oid, n) for oid, n in txn.items() if n]
        if self._waiting:
            names = self._start_changed(changed)
        if txn:
            self._since_fold += 1
            record_info(COUNTS_KEY, {names[oid]: n for oid, n in changed})
        fold = self._fold
        if self._fold_all or self._since_fold >= FOLD_EVERY:
            fold.update(names)
            fold.difference_update(self._stopped)  # folded by stop() already
        for oid, staged in self._drops.items():  # a batch's worth of deletions waits: fold
            if (oid in names and oid not in self._stopped
                    and self._unapplied.get(oid, 0) + len(staged) >= FOLD_DROPS):
                fold.add(oid)
        get = self._writer.get
        # The count each queue has once this commit is in: a folded Length holds it all.
        totals: dict[str, int] = {}
        for oid in fold:
            length = get(oid).length
            length.change(pending.get(oid, 0) + txn.get(oid, 0))
            totals[names[oid]] = int(length())
        for oid, n in changed:
            if oid not in fold:
                totals[names[oid]] = int(get(oid).length()) + pending.get(oid, 0) + n
        for oid, name in self._stopped.items():  # the Length holds it all now
            totals[name] = int(get(oid).length())
        if totals:
            record_info(TOTALS_KEY, totals)
        self._log_drops(names, fold, record_info)

    def _log_drops(self, names: dict[bytes, str], fold: set[bytes], record_info: Any) -> None:
        """Record this commit's deletions of queues that do not fold in it; make those of the
        queues that do (and every earlier one not made yet) in their trees. Readers leave them
        out from now on (IN_FLIGHT), as the commit may be in before :meth:`committed`."""
        logged: dict[str, list[Any]] = {}
        for oid, staged in self._drops.items():
            keys = list(staged)
            if oid not in names:  # its count did not change after all: it does not defer
                self._writer.get(oid).apply_logged_drops(keys)
                continue
            hidden = self._hidden.setdefault(oid, {})
            for key in keys:
                hidden[key] = IN_FLIGHT
            self._in_flight.append((oid, keys))
            if oid not in fold and oid not in self._stopped:
                logged[names[oid]] = [drops_checksum(keys), *keys]
        for oid in (*fold, *self._stopped):
            if oid in self._drops or oid in self._hidden:
                self._apply_drops(oid)
        if logged:
            record_info(DROPS_KEY, logged)
            # A commit whose only change is in its metadata stores no object, so the writer
            # never joined it (an object's first change does) and nothing would be written:
            # join it (ZODB's own way to join without an object).
            self._writer._register()

    def aborted(self) -> None:
        """The commit attempt failed: its deletions were not made (readers show them again)."""
        for oid, keys in self._in_flight:
            hidden = self._hidden.get(oid, {})
            for key in keys:
                if hidden.get(key) == IN_FLIGHT:
                    del hidden[key]
        self._in_flight = []

    def _start_changed(self, changed: list[tuple[bytes, int]]) -> dict[bytes, str]:
        """Start deferring the counts this commit changes first (see :meth:`start`): their
        records say so from this commit on, whose fold anchors their Length. The names of
        every queue the commit counts."""
        waiting, starting = self._waiting, self._starting
        for oid, _n in changed:
            name = waiting.get(oid)
            if name is not None and oid not in self._names:
                self._writer.get(oid).counted_in_log = True
                starting[oid] = name
                self._fold.add(oid)
        return {**self._names, **starting} if starting else self._names

    def _drops_committed(self) -> None:
        applied = self._fold | self._stopped.keys()
        if applied:
            self._folds += 1
        for oid, keys in self._in_flight:
            hidden = self._hidden[oid]
            for key in keys:
                hidden[key] = LOGGED
            self._unapplied[oid] = self._unapplied.get(oid, 0) + len(keys)
        self._in_flight = []
        for oid in applied:
            self._unapplied.pop(oid, None)
            hidden = self._hidden.get(oid, {})
            done, forget = self._folds, self._folds - KEEP_FOLDS
            for key, state in list(hidden.items()):
                if state <= LOGGED:
                    hidden[key] = done
                elif state <= forget:
                    del hidden[key]

    def committed(self) -> None:
        self._drops_committed()
        for oid, name in self._starting.items():  # deferring from this commit on
            self._names[oid] = name
            del self._waiting[oid]
        folded, names, pending = self._fold, self._names, self._pending
        for oid in self._stopped:  # no longer deferred: the Length holds it all
            del names[oid]
            pending.pop(oid, None)
        for oid, n in self._txn.items():
            if oid not in folded and oid in names:
                pending[oid] = pending.get(oid, 0) + n
        if folded:
            for oid in folded:
                pending.pop(oid, None)
            if folded >= names.keys():
                self._since_fold = 0
                self.fold_tid = self._storage.lastTransaction()
        self.begin()

    # -- folding everything ----------------------------------------------------------------

    def fold_all(self, run: Callable[[Callable[[], None]], None]) -> None:
        """Write every deferred count to its Length, in a commit of its own."""
        with self._lock:
            self._fold_all = True
            try:
                run(lambda: None)
            finally:
                self._fold_all = False

    def fold_for_pack(self, run: Callable[[Callable[[], None]], None]) -> float | None:
        """Fold everything, twice; the pack time to use (between the two folds), or None for
        now.

        Transactions from the second fold on are kept whole by the pack: they are what a
        reader adds to the folded Lengths (and the deletions it leaves out). The first fold
        made the logged deletions in the trees: the tree nodes as they were before it are
        what the pack can then drop. With the pack time before a single fold, they were
        what was current at the pack time, and a file packed after a burn-down kept the
        last deleted entries until the next pack. Whatever was committed between the folds
        is in the second one."""
        if not self._names:
            return None
        self.fold_all(run)
        first = self.fold_tid
        self.fold_all(run)
        if first is None or self.fold_tid is None:
            return None
        before = float(TimeStamp(first).timeTime())
        after = float(TimeStamp(self.fold_tid).timeTime())
        # A pack time is a float of seconds: good to a microsecond or so at today's dates.
        return (before + after) / 2 if after - before > PACK_TIME_GAP else after - 0.01


def stored_count(record: Any, storage: Any = None) -> int:
    """How many entries ``record`` stores (its Length, plus the changes recorded after it when
    its count is deferred; see the module docstring)."""
    length = record.length
    count = int(length())  # first: a ghost's _p_serial is not its revision's
    if not getattr(record, "counted_in_log", False):
        return count
    if storage is None:
        storage = record._p_jar.db().storage
    for attempt in range(3):
        try:
            return count + logged_changes(storage, name_of(record), length._p_serial)
        except Exception:
            # A file another process is appending to can end in a half-written transaction,
            # which FileStorage's iterator refuses to start from: look again, or count.
            if attempt == 2:
                log.warning("counting the entries of a queue instead", exc_info=True)
    return int(record.entry_count())


def name_of(record: Any) -> str:
    """The name ``record`` is stored under in its database root."""
    queues = queues_of(record._p_jar.root(), create=False)
    for name, candidate in queues.items():
        if candidate is record:
            return str(name)
    raise LookupError("queue record not found in its database root")


def logged_changes(storage: Any, name: str, after: bytes) -> int:
    """The changes of queue ``name``'s count recorded by transactions after ``after``."""
    started = time.monotonic()
    total = scanned = 0
    with _transactions(storage, p64(u64(after) + 1)) as transactions:
        for txn in transactions:
            scanned += 1
            changes = txn.extension.get(COUNTS_KEY)
            if changes:
                total += changes.get(name, 0)
    log.debug(
        "count of %r: %d changes in %d transactions (%.3f s)",
        name, total, scanned, time.monotonic() - started,
    )
    return total


@contextlib.contextmanager
def _transactions(storage: Any, start: bytes) -> Iterator[Any]:
    """The storage's transactions from ``start`` on, its iterator closed after."""
    try:
        transactions = storage.iterator(start)
        skip = False
    except (AttributeError, ValueError):
        # FileStorage cannot seek to ``start`` in a file that ends in a commit cut short (a
        # writer at work, or killed; read-only, the file is not cut): ZODB calls a misspelt
        # method for a file under 1 MB, and gives up on a larger one. From the first commit.
        transactions = storage.iterator()
        skip = True
    try:
        yield (txn for txn in transactions if txn.tid >= start) if skip else transactions
    finally:
        close = getattr(transactions, "close", None)
        if close is not None:
            close()


def _check_length(record: Any, storage: Any) -> None:
    """Put right a Length that is not the count its own commit recorded (a changed byte in
    either): the entries are counted, as after a kill when the chain breaks."""
    length = record.length
    value = int(length())  # loads it: a ghost's _p_serial is not its revision's
    try:
        name = name_of(record)
        recorded = _recorded_total(storage, name, length._p_serial)
    except Exception:  # a record not yet stored, a storage without transactions to iterate
        return
    if recorded is None or recorded == value:
        return
    stored = record.live_entry_count()
    if stored != value:
        log.warning(
            "the stored count of queue %r was %d but it holds %d entries (a damaged count "
            "record); using %d", name, value, stored, stored,
        )
        length.change(stored - value)


def _recorded_total(storage: Any, name: str, tid: bytes) -> int | None:
    """The count of queue ``name`` that transaction ``tid`` recorded, if it recorded one."""
    with _transactions(storage, tid) as transactions:
        for txn in transactions:
            if txn.tid != tid:
                return None
            total = (txn.extension.get(TOTALS_KEY) or {}).get(name)
            return total if isinstance(total, int) else None
    return None


def checked_changes(
    storage: Any, name: str, anchor: bytes, base: int, names: Collection[str]
) -> int | None:
    """The changes of queue ``name``'s count recorded after its Length's revision ``anchor``,
    if the recorded counts vouch for them: the fold at ``anchor`` recorded ``base`` (the
    Length), and each later commit that recorded a count recorded ``base`` plus the changes up
    to it. None when the chain breaks or a link is missing (a commit that changed the count and
    recorded none: a file written before counts were recorded, or a damaged byte), or when a
    commit records a count under a name that is none of the file's queues (``names``): the
    metadata pickle keeps a queue's name once and refers to it for its total, so one changed
    byte there moves both the change and the total to a name nobody looks up."""
    running, scanned, known = base, 0, set(names)
    with _transactions(storage, anchor) as transactions:
        for txn in transactions:
            scanned += 1
            totals = txn.extension.get(TOTALS_KEY) or {}
            changes = txn.extension.get(COUNTS_KEY) or {}
            if not (totals.keys() | changes.keys()) <= known:
                return None
            if txn.tid == anchor:  # the fold: it recorded the Length it wrote
                if totals.get(name) != base:
                    return None
                continue
            if scanned == 1:
                return None  # the fold's own transaction is gone: nothing vouches for base
            change = changes.get(name, 0)
            running += change
            if (change or name in totals) and totals.get(name) != running:
                return None
    if not scanned:
        return None
    log.debug("count of %r checked over %d transactions", name, scanned)
    return running - base


_by_connection: weakref.WeakKeyDictionary[Any, LogCounts] = weakref.WeakKeyDictionary()


def attach(connection: Any, counts: LogCounts) -> None:
    """Defer the counts of queues opened through the writer ``connection``."""
    _by_connection[connection] = counts


def detach(connection: Any) -> None:
    """The writer ``connection`` is closed. Its entry must go now: the value refers to its
    key, so the weak key alone never lets the connection, its database and storage go."""
    _by_connection.pop(connection, None)


def count_change(record: Any, n: int) -> None:
    """``n`` entries were added to ``record`` (removed, if negative), inside a change."""
    counts = _by_connection.get(record._p_jar)
    if counts is not None and counts.keeps(record):
        counts.change(record, n)
    else:
        record.length.change(n)


def settle(record: Any, storage: Any) -> None:
    """Inside a change: put the changes logged after ``record``'s Length into it, and keep the
    count in the Length from now on (a queue whose deferring process died). A Length that is
    the count already (written at a clean close) is checked against the count its commit
    recorded, and recounted if they differ."""
    if not getattr(record, "counted_in_log", False):
        _check_length(record, storage)
        return
    length = record.length
    base = int(length())  # loads it: a ghost's _p_serial is not its revision's
    _apply_logged_drops(record, storage, length._p_serial)
    try:
        queues = queues_of(record._p_jar.root(), create=False)
        checked = checked_changes(
            storage, name_of(record), length._p_serial, base, list(queues or ())
        )
    except Exception:  # a storage that cannot iterate its transactions: see below
        checked = None
    if checked is not None:
        length.change(checked)
        record.counted_in_log = False
        return
    try:
        change = logged_changes(storage, name_of(record), length._p_serial)
    except Exception:  # a storage that cannot iterate its transactions: count the entries
        log.warning("recounting the entries of a queue (its count was deferred)", exc_info=True)
        change = record.entry_count() - base
    # The changes come from transaction headers that no checksum covers: one wrong byte
    # there (a damaged disk) would leave the count short or long for good, and a short
    # count strands the last item. This runs only after an unclean stop: check it.
    stored = record.live_entry_count()
    if base + change != stored:
        log.warning(
            "the stored count of queue %r was %d but it holds %d entries (a damaged count "
            "record after an unclean stop); using %d",
            name_of(record), base + change, stored, stored,
        )
        change = stored - base
    length.change(change)
    record.counted_in_log = False



# -- deletions recorded in the log, read back -----------------------------------------------


METADATA_KEYS = frozenset({COUNTS_KEY, TOTALS_KEY, DROPS_KEY})  # all a queue file's commits hold


def logged_drops(
    storage: Any, name: str, after: bytes, unreadable: list[str] | None = None,
    names: Collection[str] | None = None,
) -> list[Any]:
    """The keys of the entries of queue ``name`` deleted through the log by transactions after
    ``after`` (see the module docstring). A transaction whose list does not match its checksum
    (a changed byte) is passed over, and said in ``unreadable`` (an opener then refuses the
    file; another process's read shows those items). Given
    the file's queue ``names``, so is one whose metadata holds what ackqueue never writes
    there: a key other than its own, or a queue name none of the file's queues has (the
    metadata pickle keeps a name once and refers to it after: one changed byte in it, or in
    the key "ackqueue.drops", would otherwise hide the deletions it records)."""
    found: list[Any] = []
    with _transactions(storage, p64(u64(after) + 1)) as transactions:
        for txn in transactions:
            metadata = txn.extension
            logged = metadata.get(DROPS_KEY)
            listed: Any = logged.get(name) if isinstance(logged, dict) else None
            written = names is None or _as_written(metadata, names)
            if listed is None and written:
                continue
            keys = listed[1:] if written and isinstance(listed, list) and listed else None
            if keys is None or listed[0] != drops_checksum(keys):
                if unreadable is not None:
                    unreadable.append(
                        f"the deletions recorded by transaction {txn.tid.hex()} (damaged)"
                    )
                continue
            found.extend(keys)
    return found


def _as_written(metadata: dict[str, Any], names: Collection[str]) -> bool:
    """Whether ``metadata`` holds only what ackqueue writes: its keys, each a mapping by the
    names of the file's queues."""
    if not metadata.keys() <= METADATA_KEYS:
        return False
    return all(isinstance(by_name, dict) and by_name.keys() <= set(names)
               for by_name in metadata.values())


def _apply_logged_drops(record: Any, storage: Any, after: bytes) -> None:
    """Make in ``record``'s tree the deletions logged after ``after`` (an opener settling a
    queue whose deferring process died). A queue that may have logged some (format 6) and
    whose log cannot be read back whole is a damaged file: opening it would hand out again
    items whose ack returned."""
    if int(getattr(record, "format_version", 1)) < LOGGED_DROPS_FORMAT:
        return  # it never logged a deletion
    name = name_of(record)
    unreadable: list[str] = []
    try:
        names = list(queues_of(record._p_jar.root(), create=False) or ())
        keys = logged_drops(storage, name, after, unreadable, names)
    except Exception as exc:
        unreadable.append(f"the transactions after {after.hex()} ({exc})")
    if unreadable:
        raise DamagedFileError(damaged_message(record.stored_in(), (
            f"{unreadable[0]} held deletions of queue {name!r} that cannot be read back, so "
            "items acked before it was closed would be delivered again"
        )))
    record.apply_logged_drops(keys)


class ReplayedDrops:
    """The entry log of a connection of another process (``ackqueue stats``/``peek``,
    salvage): the deletions each deferring queue's log recorded after its Length's revision,
    read once."""

    def __init__(self, storage: Any, connection: Any) -> None:
        self._storage = storage
        self._connection = connection
        self._known: dict[bytes, frozenset[Any]] = {}

    def hidden(self, oid: bytes) -> Collection[Any]:
        known = self._known.get(oid)
        if known is None:
            known = self._known[oid] = frozenset(self._read(oid))
        return known

    def _read(self, oid: bytes) -> Iterable[Any]:
        """The deletions logged for record ``oid``; none where they cannot be read (a
        damaged file: salvage reads what it can), said."""
        try:
            record = self._connection.get(oid)
            if not getattr(record, "counted_in_log", False):
                return ()
            length = record.length
            int(length())  # loads it: a ghost's _p_serial is not its revision's
            return logged_drops(self._storage, name_of(record), length._p_serial)
        except Exception:
            log.warning("could not read the deletions in the log of queue record %s",
                        oid.hex(), exc_info=True)
            return ()

    def drop(self, record: QueueRecord, key: Any) -> bool:
        return False
