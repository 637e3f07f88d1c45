"""What ackqueue keeps in the database: one record per named queue, one entry per item.

The entries of a queue are a BTree in delivery order (the key of an entry is its place in that
order: see ``AckQueue._make_key``), and an entry is kept in one of two ways:

- inline (format 3): one ``bytes`` value in its tree bucket, a small header (when it was put,
  when it is due, its deliveries so far, its group, its key if put by key) and the encoded item
  (see :class:`InlineEntry`). A put then rewrites one bucket and makes no record of its own, and a
  get reads the item out of the bucket it loads anyway. One process writing a queue (the
  default) stores its entries so.
- an :class:`Entry` record of its own, referred to from the bucket: what shared mode stores
  (several processes mark holds and acks on their own entries, which other processes' changes
  to other entries do not touch), what an item larger than :data:`INLINE_MAX` gets, and what
  every entry of a file of format 1 or 2 is.

A queue written by one process may delete entries through an :class:`EntryLog` (the
commits' metadata) and from its tree only later, in batches; every read here leaves those
out. A tree may hold both kinds of entry; every reader takes either. An entry's fields change
only through :meth:`QueueRecord.change_entry`, which rewrites an inline value or sets the
record's attributes (an inline entry given what only a record holds becomes a record).

A queue record carries the format it was written in (:data:`FORMAT_VERSION`; a record without
one was written before formats were numbered, and is format 1) and the name of the serializer
its items are encoded with (``"pickle"`` for a record without one).

While a queue with a serializer other than pickle is open on a database, its records load
through :func:`restricted_class_factory`: only the persistent classes of this module, BTrees
and persistent may be named, so a crafted record cannot make the loader run code. The items
are the serializer's business: a pickle item is code, a JSON item is data.
"""

from __future__ import annotations

import importlib
import io
import itertools
import math
import pickle
import struct
import sys
import weakref
import zlib
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypeVar

from BTrees.Length import Length
from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree
from persistent import Persistent
from persistent.mapping import PersistentMapping
from ZODB.utils import oid_repr

from ackqueue.errors import DamagedFileError, UnsafeRecordError, damaged_message

ROOT_KEY = "ackqueue"
T = TypeVar("T")

# The stored format this code writes. 1: records without a format_version (pickle items);
# 2: records that name their serializer; 3: entries may be inline (bytes values in the tree);
# 4: a FIFO or LIFO queue made in shared mode keeps its entries in shards (ShardedEntries);
# 5: such a queue keeps its key index, seen-set and delay index in shards too (ShardedIndex).
# A record of a higher format is refused, not misread. A record of format 1 or 2 is raised to
# format 3 when its first inline entry is stored: until then an older version still reads it;
# one of format 4 is raised to 5 when it makes its first sharded index (one it has keeps its
# tree). A queue made by a single process is written in format 3, and raised to 6 by its
# first deletion recorded in the commits' metadata instead of its tree (see EntryLog): an older
# version would not know to leave those entries out.
FORMAT_VERSION = 6
INLINE_FORMAT = 3
INDEX_FORMAT = 5
LOGGED_DROPS_FORMAT = 6

# Sequence numbers are reserved in blocks so that a put does not rewrite the queue record.
SEQ_BLOCK = 1024
QUEUE_KINDS = frozenset({"fifo", "lifo", "priority"})  # QueueRecord.kind: the delivery order


class EntryTree(LOBTree):
    """The entries of a FIFO or LIFO queue, in small nodes.

    Every commit rewrites each tree node it changes whole, so small nodes keep both the bytes
    appended per put/ack and the pickling work small (LOBTree's defaults are 60 and 500).
    """

    max_leaf_size = 16
    max_internal_size = 32


class PriorityEntryTree(OOBTree):
    """The entries of a PriorityAckQueue, in small nodes (see :class:`EntryTree`)."""

    max_leaf_size = 16
    max_internal_size = 32


# Shared mode (format 4): the entries of a FIFO or LIFO queue in shards, one tree per block of
# SHARD_SEQS sequence numbers of one priority, listed in an index by shard number (the key
# shifted right by SHARD_BITS: shards are contiguous ranges of keys, so the index in order,
# each shard in order, is the delivery order). Each process in shared mode numbers its puts
# from blocks of its own, aligned to shards (shared/mode.py's SeqBlocks), so no two processes
# insert into one tree: in one tree, every insert marks each internal node it passes
# read-current (BTrees' _BTree_set), and a bucket split by one process failed the puts of
# every other (0.32 conflicts an item with 4 processes putting; see CHANGELOG, format 4).
SEQ_BITS = 40  # an entry key's sequence number part (see ackqueue/delivery/ordering.py)
SEQ_MASK = (1 << SEQ_BITS) - 1
SHARD_BITS = 6
SHARD_SEQS = 1 << SHARD_BITS
# An emptied shard is deleted once its block is this many sequence numbers behind the record's
# reserved ones: a block still being put into is among the newest, and deleting its shard
# would fail its owner's next put (it retries, in a new shard: sound, but a conflict).
RETIRE_LAG = 4096
RETIRE_SCAN = 64  # shards looked at from the head per sweep (retire_empty)


class EntryShard(Persistent):
    """The entries of one shard (see :class:`ShardedEntries`).

    Every insert writes it (a few bytes) and deleting it from the index writes it too, so an
    insert and a deletion racing each other conflict whichever commits first: the insert is
    retried in a new shard, or the deletion finds the shard no longer empty.
    """

    def __init__(self, block: int) -> None:
        self.tree = EntryTree()
        self.block = block  # its sequence numbers' block: seq >> SHARD_BITS
        self.retired = False


class ShardIndex(LOBTree):
    """Shard number -> :class:`EntryShard` (written when a shard is made or deleted)."""

    max_leaf_size = 32
    max_internal_size = 32


class ShardedEntries(Persistent):
    """A FIFO or LIFO queue's entries in shards: a mapping of entry keys to entries with the
    part of BTrees' mapping interface that :class:`QueueRecord` uses (``get``, ``in``,
    ``[]``, ``pop``, ``len``, ``keys``/``items``/``values`` from a ``min``, ``minKey``). Written
    once, when made: the index and the shards are objects of their own."""

    def __init__(self, lifo: bool) -> None:
        self.shards = ShardIndex()
        self.lifo = lifo

    def _seq(self, key: int) -> int:
        return SEQ_MASK - (key & SEQ_MASK) if self.lifo else key & SEQ_MASK

    def shard_of(self, key: int) -> EntryShard | None:
        shard: EntryShard | None = self.shards.get(key >> SHARD_BITS)
        return shard

    def get(self, key: int, default: Any = None) -> Any:
        shard = self.shard_of(key)
        return default if shard is None else shard.tree.get(key, default)

    def __getitem__(self, key: int) -> Any:
        shard = self.shard_of(key)
        if shard is None:
            raise KeyError(key)
        return shard.tree[key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int) and self.get(key) is not None

    def __setitem__(self, key: int, value: Any) -> None:
        self.store(key, value, None)

    def store(self, key: int, value: Any, reserved: int | None) -> None:
        """Store ``value`` under ``key``, in a new shard if its own is not listed; given the
        record's ``reserved`` numbers, making that shard (once a block) first deletes those
        emptied near the head meanwhile (see :meth:`retire_empty`)."""
        number = key >> SHARD_BITS
        shard = self.shards.get(number)
        if shard is None:
            if reserved is not None:
                self.retire_empty(None, reserved)
            shard = self.shards[number] = EntryShard(self._seq(key) >> SHARD_BITS)
        shard.tree[key] = value
        shard._p_changed = True  # conflicts with a deletion of the shard racing this

    def pop(self, key: int) -> Any:
        shard = self.shard_of(key)
        if shard is None:
            raise KeyError(key)
        return shard.tree.pop(key)

    def retire_empty(self, key: int | None, reserved: int) -> int:
        """Delete from the index the shard of ``key`` (None: the first RETIRE_SCAN shards)
        if it is empty and its block is RETIRE_LAG sequence numbers behind ``reserved``;
        return how many were deleted."""
        behind = (reserved - RETIRE_LAG) >> SHARD_BITS
        if key is None:
            found = list(itertools.islice(self.shards.items(), RETIRE_SCAN))
        else:
            shard = self.shard_of(key)
            found = [] if shard is None else [(key >> SHARD_BITS, shard)]
        retired = 0
        for number, shard in found:
            if shard.block < behind and not shard.tree:
                shard.retired = True  # written: an insert racing this conflicts
                del self.shards[number]
                retired += 1
        return retired

    def __len__(self) -> int:
        return sum(len(shard.tree) for shard in self.shards.values())

    def __bool__(self) -> bool:
        return any(shard.tree for shard in self.shards.values())

    def keys_between(self, lo: int, hi: int) -> Iterator[int]:
        """The stored keys from ``lo`` through ``hi``, two keys of one block (one shard)."""
        shard = self.shard_of(lo)
        return iter(()) if shard is None else iter(edge_loaded(shard.tree).keys(min=lo, max=hi))

    def _shards_from(self, min: int | None) -> Iterator[EntryShard]:
        index = edge_loaded(self.shards)
        return iter(index.values() if min is None else index.values(min=min >> SHARD_BITS))

    def keys(self, min: int | None = None, excludemin: bool = False) -> Iterator[int]:
        for shard in self._shards_from(min):
            tree = edge_loaded(shard.tree)
            yield from tree.keys() if min is None else tree.keys(min=min, excludemin=excludemin)

    def items(self, min: int | None = None, excludemin: bool = False) -> Iterator[tuple[int, Any]]:
        for shard in self._shards_from(min):
            tree = edge_loaded(shard.tree)
            yield from tree.items() if min is None else tree.items(min=min, excludemin=excludemin)

    def values(self) -> Iterator[Any]:
        for _, value in self.items():
            yield value

    def minKey(self) -> int:  # noqa: N802 - BTrees' name
        for key in self.keys():
            return key
        raise ValueError("empty tree")

    def damage(self) -> str | None:
        """What is wrong with the shards, if the index or a shard's tree is out of order or
        does not hold together (see :func:`tree_damage`), or a key is outside its shard's
        range (then all of them are in order, each shard being a range of its own)."""
        why = tree_damage(self.shards)
        if why is not None:
            return f"has a shard index that {why}"
        for number, shard in self.shards.items():
            why = tree_damage(shard.tree)
            if why is not None:
                return f"has a shard that {why}"
            for key in shard.tree:
                if key >> SHARD_BITS != number:
                    return f"holds key {key!r} in shard {number}, not its own"
        return None


# Shared mode (format 5): the indexes beside the entries, each in INDEX_SHARDS trees. A put by
# key inserts its key into the key index (and, once done, the seen-set); keys are digests as a
# crawler's are, spread over the whole tree, so in one tree a bucket split by one process (every
# ~15 inserts) failed the puts of every other process that had passed the same internal nodes
# (BTrees' _BTree_set marks them read-current): 0.12 conflicts an item with 4 processes over
# ZEO, and over PostgreSQL puts gave up after 50 retries. A delayed put inserts its entry key
# into the delay index, next to the other processes' keys: 0.05-0.06 over ZEO, 0.3 over PG.
# A key goes to the shard its CRC-32 names, an entry key to the one its block names (the block
# is a process's own: see SHARD_BITS), so two processes insert into one tree only by chance.
INDEX_SHARDS = 64


def index_shard(key: Any) -> int:
    """The shard of a :class:`ShardedIndex` that ``key`` (an entry key, or a put's key as
    bytes or str) belongs in; TypeError for any other key."""
    if isinstance(key, int) and not isinstance(key, bool):
        return (key >> SHARD_BITS) % INDEX_SHARDS
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return zlib.crc32(key) % INDEX_SHARDS
    raise TypeError(f"a sharded index holds no key of type {type(key).__name__}")


class ShardedIndex(Persistent):
    """A mapping kept in :data:`INDEX_SHARDS` trees, with the part of BTrees' interface that the
    key index, the seen-set and the delay index are used through (``get``, ``in``, ``[]``,
    ``del``, ``pop``, ``len``, ``keys``/``items``/``values`` from a ``min``). Written once, when
    made (its trees are objects of their own, each made then: none is ever added).

    Its order is by shard, then by key within a shard: a walk from a ``min`` goes on from
    where that key is (stored or not) in this order, so a sweep that remembers where it
    stopped comes back to every key once (the seen-set's expiry, storage/keys.py).
    """

    def __init__(self, tree_class: type) -> None:
        self.shards = tuple(tree_class() for _ in range(INDEX_SHARDS))

    def _tree(self, key: Any) -> Any:
        return self.shards[index_shard(key)]

    # A key of a type the index does not hold is absent (BTrees raise TypeError for some).
    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self._tree(key).get(key, default)
        except TypeError:
            return default

    def __getitem__(self, key: Any) -> Any:
        try:
            tree = self._tree(key)
            return tree[key]
        except TypeError:
            raise KeyError(key) from None

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._tree(key)
        except TypeError:
            return False

    def __setitem__(self, key: Any, value: Any) -> None:
        self._tree(key)[key] = value

    def __delitem__(self, key: Any) -> None:
        try:
            tree = self._tree(key)
            del tree[key]
        except TypeError:
            raise KeyError(key) from None

    def pop(self, key: Any, *default: Any) -> Any:
        try:
            return self._tree(key).pop(key, *default)
        except TypeError:
            if default:
                return default[0]
            raise KeyError(key) from None

    def tree_of(self, key: Any) -> Any:
        """The tree ``key`` belongs in, safe to search a range of (see :func:`edge_loaded`)."""
        return edge_loaded(self._tree(key))

    def __len__(self) -> int:
        return sum(len(tree) for tree in self.shards)

    def __bool__(self) -> bool:
        return any(self.shards)

    def _walk(self, min: Any, excludemin: bool, part: str) -> Iterator[Any]:
        first = 0 if min is None else index_shard(min)
        for number in range(first, INDEX_SHARDS):
            tree = edge_loaded(self.shards[number])
            walk = getattr(tree, part)
            yield from walk() if min is None or number != first else walk(
                min=min, excludemin=excludemin
            )

    def keys(self, min: Any = None, excludemin: bool = False) -> Iterator[Any]:
        return self._walk(min, excludemin, "keys")

    __iter__ = keys

    def items(self, min: Any = None, excludemin: bool = False) -> Iterator[tuple[Any, Any]]:
        return self._walk(min, excludemin, "items")

    def values(self) -> Iterator[Any]:
        return self._walk(None, False, "values")


class Entry(Persistent):
    """One stored item: its pickle, when it was put, deliveries so far, and when it is due.

    ``not_before`` (epoch seconds, 0 = at once) is a class default so that entries written
    before delays existed still load.
    """

    not_before = 0.0
    group: str | None = None  # put(group=): a class default, so older entries have none
    # Put by key (storage/keys.py): the key as indexed, and for how many seconds to
    # remember it once the item is done (None: not at all; math.inf: forever).
    item_key: bytes | None = None
    remember: float | None = None
    # Shared mode: acked, waiting for the sweeper to delete it (see ackqueue/shared/sweeping.py).
    # An ack that only marks its own entry writes no tree bucket, so it conflicts with nothing.
    done = False
    # Which entry this is: its key (a PriorityAckQueue's, its sequence number), set when it is
    # stored (QueueRecord.add_entry). A changed byte in a tree bucket's reference to it points
    # at another record, an acked item's old one say, which still loads: QueueRecord.vouch
    # tells them apart. None: stored before entries said so (not checked).
    key_id: Any = None

    def __init__(
        self, data: bytes, put_at: float, not_before: float = 0.0, group: str | None = None
    ) -> None:
        self.data = data
        self.put_at = put_at
        self.attempts = 0
        if not_before:
            self.not_before = not_before
        if group is not None:
            self.group = group


# An inline entry's header: a tag (a changed one is damage, not a misread entry), when it was
# put, when it is due (0: at once), its deliveries so far, and the length of its group's name
# in UTF-8 (-1: no group). An entry put by key (its own tag) has a second header, its key's
# length and how long to remember the key once done (NaN: not at all). The group's name, the
# key and the encoded item follow.
_INLINE = struct.Struct("<BddIi")
_KEYED = struct.Struct("<id")
_INLINE_TAG = 0xA3
_INLINE_KEYED_TAG = 0xA4
# The fields an inline entry holds; a change of any other (a hold, a done mark) makes the
# entry a record of its own (QueueRecord.change_entry).
INLINE_FIELDS = frozenset(
    {"data", "put_at", "attempts", "not_before", "group", "item_key", "remember"}
)
# The largest encoded item kept inline. Every put or ack rewrites its bucket whole (up to 16
# entries): small items make that cheaper than a record of their own (measured on tmpfs: 115
# bytes 72 vs 93 us a put, 1 KB 92 vs 104), larger ones would make each commit write many
# kilobytes of other items (3 KB: 110 vs 99 us, each put rewriting ~12 of them, about ten
# times the bytes of a record of its own and its bucket of references).
INLINE_MAX = 256


@dataclass(frozen=True, slots=True)
class InlineEntry:
    """An entry kept inline in its tree bucket, decoded: read-only (it is a copy; change the
    stored one through :meth:`QueueRecord.change_entry`). It has every attribute an
    :class:`Entry` has; those that only a record holds are always their defaults."""

    data: bytes
    put_at: float
    attempts: int = 0
    not_before: float = 0.0
    group: str | None = None
    item_key: bytes | None = None
    remember: float | None = None
    done: ClassVar[bool] = False
    holder: ClassVar[Any] = None
    key_id: ClassVar[Any] = None

    def encoded(self) -> bytes:
        """The value stored in the tree for this entry."""
        return _encoded(
            self.data, self.put_at, self.attempts, self.not_before, self.group,
            self.item_key, self.remember,
        )


def _encoded(
    data: bytes,
    put_at: float,
    attempts: int,
    not_before: float,
    group: str | None,
    item_key: bytes | None = None,
    remember: float | None = None,
) -> bytes:
    name = b"" if group is None else group.encode("utf-8", "surrogatepass")
    named = -1 if group is None else len(name)
    if item_key is None:
        return _INLINE.pack(_INLINE_TAG, put_at, not_before, attempts, named) + name + data
    return b"".join((
        _INLINE.pack(_INLINE_KEYED_TAG, put_at, not_before, attempts, named),
        _KEYED.pack(len(item_key), math.nan if remember is None else remember),
        name, item_key, data,
    ))


StoredEntry = Entry | InlineEntry  # what the entry methods of a QueueRecord give


def inline_entry(value: bytes) -> InlineEntry:
    """The entry stored inline as ``value``; ValueError if ``value`` is no inline entry (a
    changed byte in its header)."""
    put_at, due, attempts, group, keyed, remember, at = _inline_header(value)
    if keyed < 0:
        return InlineEntry(value[at:], put_at, attempts, due, group)
    return InlineEntry(
        value[at + keyed:], put_at, attempts, due, group, value[at:at + keyed],
        None if math.isnan(remember) else remember,
    )


def inline_group(value: bytes) -> str | None:
    """The group of the entry stored inline as ``value``, read from its header alone (an open
    reads every grouped entry's: see :meth:`QueueRecord.entry_groups`); ValueError as
    :func:`inline_entry`."""
    return _inline_header(value)[3]


def _inline_header(value: bytes) -> tuple[float, float, int, str | None, int, float, int]:
    """``(put_at, due, attempts, group, key length, remember, offset of the key or data)``
    of the inline entry ``value`` (key length -1: put without a key); ValueError if its
    header is damaged."""
    try:
        tag, put_at, due, attempts, named = _INLINE.unpack_from(value)
        at = _INLINE.size
        keyed, remember = _KEYED.unpack_from(value, at) if tag == _INLINE_KEYED_TAG else (-1, 0)
    except struct.error as exc:
        raise ValueError(f"an inline entry of {len(value)} bytes is too short") from exc
    if tag == _INLINE_KEYED_TAG:
        at += _KEYED.size
        if keyed < 0:
            raise ValueError("an inline entry's header is damaged")
    elif tag != _INLINE_TAG:
        raise ValueError("an inline entry's header is damaged")
    if named < -1 or at + max(named, 0) + max(keyed, 0) > len(value):
        raise ValueError("an inline entry's header is damaged")
    group = None
    if named >= 0:
        try:
            group = value[at:at + named].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise ValueError("an inline entry's group name is damaged") from exc
        at += named
    return put_at, due, attempts, group, keyed, remember, at


class DeadRecord(Persistent):
    """A dead letter: an item taken out of delivery, with why and when."""

    group: str | None = None  # its entry's group, for requeue_dead (a class default)

    def __init__(
        self, key: Any, data: bytes, put_at: float, attempts: int, reason: str, when: float
    ) -> None:
        self.key = key
        self.data = data
        self.put_at = put_at
        self.attempts = attempts
        self.reason = reason
        self.when = when


class EntryLog(Protocol):
    """Deletions of entries recorded in the commits' metadata and made in the entry tree only
    later, in batches (storage/counts.py keeps them for a queue file written by one process).

    Deleting an acked item's inline entry rewrote its tree bucket (sixteen entries, each
    pickled again) in every ack's commit; recorded in the commit's metadata instead, the
    ack's commit stores no object at all. Until the batch is applied, the entries stay in the
    tree, and every read of this record through a connection with a log leaves them out."""

    def hidden(self, oid: bytes) -> Collection[Any]:
        """The keys of queue record ``oid`` deleted through the log and maybe still in its tree,
        as this connection sees them."""
        ...

    def drop(self, record: QueueRecord, key: Any) -> bool:
        """Record the deletion of ``key`` in the commit being made, if the log takes it
        (True); else the caller deletes it from the tree."""
        ...


# connection -> the log its reads and deletions go through (none: the tree is all there is)
_entry_logs: weakref.WeakKeyDictionary[Any, EntryLog] = weakref.WeakKeyDictionary()


def attach_entry_log(owner: Any, log: EntryLog) -> None:
    """Read (and, for the writer, delete) the entries of the records of ``owner`` (a
    connection, or a database: each of its connections without a log of its own) through
    ``log``."""
    _entry_logs[owner] = log


def detach_entry_log(owner: Any) -> None:
    _entry_logs.pop(owner, None)


class QueueRecord(Persistent):
    """The stored state of one named queue.

    The dead letters and the index of delayed entries are made when first needed; their class
    defaults (None) let records written before they existed open unchanged.
    """

    dead: Any = None  # LOBTree: dead-letter id -> DeadRecord
    dead_length: Any = None  # BTrees.Length of ``dead``
    dead_next = 0
    delayed: Any = None  # entry key -> not_before, for every entry stored with a delay
    # True while a process keeps the count in transaction metadata instead of ``length``:
    # read the count with ``counts.stored_count`` (see counts.py).
    counted_in_log = False
    paused = False  # while True no item is handed out, in any process (q.pause()); puts go on
    # A count every pause and resume moves (BTrees.Length; made at a shared open): what a take
    # in shared mode reads as current (queue_paused), instead of this record, which other
    # edits write (a block of sequence numbers, a burial, a turn of the items put without a
    # group): a take reading the record as current conflicted with each of them.
    pause_changes: Any = None
    grouped = False  # True once an entry was put with a group: the ready index must know them
    group_pauses: Any = None  # OOBTree: group -> paused until (epoch seconds), q.pause_group()
    group_turns: Any = None  # OOBTree: group -> last delivery (shared mode with group rules)
    # The last delivery of the items put without a group, which form one group of their own
    # under the same rules (None: none yet); not in ``group_turns``, whose keys are str.
    ungrouped_turn: float | None = None
    # OOBTree: group -> (max_held, interval), None for the queue's option; q.set_group()
    group_settings: Any = None
    keyed: Any = None  # OOBTree: indexed key -> entry key, for every live item put by key
    seen: Any = None  # OOBTree: indexed key -> until when it is remembered (math.inf: forever)
    # True once shared mode may have left entries marked ``done``: the next single-process open
    # deletes them before it reads the backlog (sweep_done in storage/book.py).
    done_marks = False
    format_version = 1  # written before formats were numbered: the first one
    serializer = "pickle"  # the name of the serializer of the items (storage/items.py)

    # The name the queue was made under (None: made before records kept it). The mapping of
    # names to records is what an open looks up; a changed byte in a name there would make
    # the queue look absent, and a new empty one be made beside it (see Book).
    name: str | None = None

    def __init__(
        self, kind: str, serializer: str = "pickle", name: str | None = None,
        sharded: bool = False,
    ) -> None:
        """A new queue record; ``sharded``: its entries in shards (a FIFO or LIFO queue
        made in shared mode; see :class:`ShardedEntries`)."""
        sharded = sharded and kind != "priority"  # its keys are items: no range a process has
        self.format_version = INDEX_FORMAT if sharded else INLINE_FORMAT
        if name is not None:
            self.name = name
        self.serializer = serializer
        self.kind = kind
        self.entries: Any = (
            ShardedEntries(lifo=kind == "lifo") if sharded
            else PriorityEntryTree() if kind == "priority" else EntryTree()
        )
        self.length = Length()
        self.seq_reserved = 0

    # -- its entries -----------------------------------------------------------------------
    # Every other module reads and changes a queue's entries through these methods, never
    # through ``entries`` itself: how the entries are kept (inline values and Entry records in
    # a BTree in delivery order: see the module docstring) is this class's business, so that
    # a change of it is made here alone (tests/project/test_stored_format.py).

    def _entry_log(self) -> EntryLog | None:
        """The log of this record's connection, else of its database (see
        :func:`attach_entry_log`)."""
        jar = self._p_jar
        if jar is None or not _entry_logs:
            return None
        log = _entry_logs.get(jar)
        return log if log is not None else _entry_logs.get(jar.db())

    def _hidden(self) -> Collection[Any]:
        """The keys deleted through the entry log that may still be in the tree (see
        :class:`EntryLog`): every read here leaves them out."""
        log = self._entry_log()
        return log.hidden(self._p_oid) if log is not None else ()

    def _stored(self, key: Any) -> Any:
        """The tree's value under ``key``; KeyError if it is not stored (or deleted through the
        entry log)."""
        hidden = self._hidden()
        if hidden and key in hidden:
            raise KeyError(key)
        return self.entries[key]

    def entry(self, key: Any) -> StoredEntry | None:
        """Entry ``key``, or None if it is not stored."""
        found = self.entries.get(key)
        if found is None:
            return None
        hidden = self._hidden()
        return None if hidden and key in hidden else self._an_entry(key, found)

    def entry_at(self, key: Any) -> StoredEntry:
        """Entry ``key``; KeyError if it is not stored."""
        return self._an_entry(key, self._stored(key))

    def _an_entry(self, key: Any, value: Any) -> StoredEntry:
        """``value``, stored under ``key``, as an entry (a record, a ghost too: its class is
        known without loading it; or an inline value, decoded); else a
        :class:`~ackqueue.DamagedFileError`."""
        if isinstance(value, Entry):
            return value
        if isinstance(value, bytes):
            try:
                return inline_entry(value)
            except ValueError as exc:
                raise self._damaged_inline(key, exc) from exc
        raise DamagedFileError(damaged_message(self.stored_in(), (
            f"its entry tree holds {type(value).__name__} under key {key!r} where an entry "
            "belongs"
        )))

    def _damaged_inline(self, key: Any, exc: ValueError) -> DamagedFileError:
        why = f"its entry under key {key!r} is damaged ({exc})"
        return DamagedFileError(damaged_message(self.stored_in(), why))

    def has_entry(self, key: Any) -> bool:
        if key not in self.entries:
            return False
        hidden = self._hidden()
        return not (hidden and key in hidden)

    def entry_count(self) -> int:
        """How many entries are stored, those marked done (shared mode) included."""
        entries = self.entries
        hidden = self._hidden()
        if not hidden:
            return len(entries)
        return len(entries) - sum(1 for key in list(hidden) if key in entries)

    def live_entry_count(self) -> int:
        """How many entries are stored and not marked done: the items the queue holds (reads
        every entry once shared mode may have marked some)."""
        if not self.done_marks:
            return self.entry_count()
        return sum(1 for _, entry in self.entry_items() if not entry.done)

    def entry_keys(self, after: Any = None) -> Iterator[Any]:
        """The stored keys in delivery order, from the first or from just after ``after``."""
        entries = edge_loaded(self.entries)
        keys = entries.keys() if after is None else entries.keys(min=after, excludemin=True)
        hidden = self._hidden()
        if hidden:
            keys = (key for key in keys if key not in hidden)
        return self._walked(keys)

    def waiting_through(self, key: Any, now: float) -> Any:
        """How far from ``key`` (an entry not yet due at ``now``) the entries stored after it
        in its block (the SHARD_SEQS entry keys that share all but their last SHARD_BITS bits)
        wait too: the last key of that run, or None if it ends at ``key`` or if an entry of
        the block is due (in the delay index, due by ``now``). Jobs put ahead come in runs: a
        look for the next ready entry passes a block of them at a few range reads, not a
        lookup a key."""
        delayed = self.delayed
        if delayed is None or not isinstance(key, int) or isinstance(key, bool):
            return None
        last = key | (SHARD_SEQS - 1)
        # A block's keys are in one tree of a sharded index (see index_shard).
        tree = delayed.tree_of(key) if isinstance(delayed, ShardedIndex) else edge_loaded(delayed)
        # The C iterations of BTrees, not a Python step a key: this runs at every look.
        if min(tree.values(min=key, max=last), default=now) <= now:
            return None  # one of them is due: the look must find it
        entries = edge_loaded(self.entries)
        try:
            stored = list(
                entries.keys_between(key, last) if isinstance(entries, ShardedEntries)
                else entries.keys(min=key, max=last)
            )
        except RuntimeError as exc:
            self._broken_walk(exc)
            raise
        hidden = self._hidden()
        if hidden:
            stored = [one for one in stored if one not in hidden]
        waiting = set(tree.keys(min=key, max=last))
        for at, stored_key in enumerate(stored):  # a run that ends inside the block
            if stored_key not in waiting:
                return stored[at - 1] if at > 1 else None
        return last

    def entry_items(self, after: Any = None) -> Iterator[tuple[Any, StoredEntry]]:
        """``(key, entry)`` in delivery order, from the first or from just after ``after``."""
        entries = edge_loaded(self.entries)
        items = entries.items() if after is None else entries.items(min=after, excludemin=True)
        hidden = self._hidden()
        if hidden:
            items = (item for item in items if item[0] not in hidden)
        return self._walked_entries(items)

    def entry_groups(self) -> Iterator[tuple[Any, str]]:
        """``(key, group)`` of every stored entry put with a group and not done, in delivery
        order, passing over those whose record does not load (see :func:`loads`). An inline
        entry's group is read from its header alone: an open reads every grouped entry, and
        decoding each whole was a quarter of the open's time."""
        hidden = self._hidden()
        try:
            for key, value in edge_loaded(self.entries).items():
                if hidden and key in hidden:
                    continue
                if isinstance(value, bytes):
                    try:
                        group = inline_group(value)
                    except ValueError as exc:
                        raise self._damaged_inline(key, exc) from exc
                else:
                    entry = self._an_entry(key, value)
                    if not loads(entry) or entry.done:
                        continue
                    group = entry.group
                if group is not None:
                    yield key, group
        except RuntimeError as exc:
            self._broken_walk(exc)
            raise

    def _walked_entries(
        self, items: Iterable[tuple[Any, Any]]
    ) -> Iterator[tuple[Any, StoredEntry]]:
        """:meth:`_walked` of ``items``, each value made an entry (one generator: the
        read-ahead of every get walks here)."""
        try:
            for key, value in items:
                yield key, value if isinstance(value, Entry) else self._an_entry(key, value)
        except RuntimeError as exc:
            self._broken_walk(exc)
            raise

    def _walked(self, walk: Iterable[T]) -> Iterator[T]:
        """``walk`` of the entry tree; a :class:`~ackqueue.DamagedFileError` where BTrees' C
        iteration fails on a damaged bucket chain (a bucket's next reference damaged into one
        to another record: "the bucket being iterated changed size")."""
        try:
            yield from walk
        except RuntimeError as exc:
            self._broken_walk(exc)
            raise

    def _broken_walk(self, exc: RuntimeError) -> None:
        """Raise :class:`~ackqueue.DamagedFileError` if the tree a walk broke off in is
        damaged (a second walk from its root fails too); else return, to let ``exc`` out."""
        why = self.entry_damage()
        if why is not None:
            why = f"its entry tree {why}"
            raise DamagedFileError(damaged_message(self.stored_in(), why)) from exc

    def new_entry(
        self,
        key: Any,
        data: bytes,
        put_at: float,
        not_before: float = 0.0,
        group: str | None = None,
        *,
        item_key: bytes | None = None,
        remember: float | None = None,
        own_record: bool = False,
    ) -> None:
        """Store a new entry under ``key``: inline, unless ``own_record`` (shared
        mode's entries, whose holds and acks are marked on them) or an item larger than
        :data:`INLINE_MAX` asks for a record of its own."""
        if own_record or len(data) > INLINE_MAX:
            entry = Entry(data, put_at, not_before, group)
            entry.key_id = self._key_id(key)
            if item_key is not None:
                entry.item_key = item_key
            if remember is not None:
                entry.remember = remember
            self._add(key, entry)
            return
        if self.format_version < INLINE_FORMAT:
            self.format_version = INLINE_FORMAT  # older versions must not misread the tree
        self._add(key, _encoded(data, put_at, 0, not_before, group, item_key, remember))

    def _add(self, key: Any, value: Entry | bytes) -> None:
        entries = self.entries
        if isinstance(entries, ShardedEntries):
            # A shard made for it deletes those emptied near the head meanwhile (one emptied
            # while its block was among the newest is kept by drop_entry).
            entries.store(key, value, self.seq_reserved)
        else:
            entries[key] = value

    def change_entry(self, key: Any, **changes: Any) -> None:
        """Change fields of entry ``key`` (KeyError if it is not stored): an inline one is
        stored anew, or, given a field only a record holds (``holder``, ``done``) or an item
        larger than :data:`INLINE_MAX`, becomes a record of its own."""
        value = self._stored(key)
        if isinstance(value, Entry):
            for name, changed in changes.items():
                setattr(value, name, changed)
            return
        entry = self._an_entry(key, value)
        assert isinstance(entry, InlineEntry)  # an Entry was handled above
        if changes.keys() <= INLINE_FIELDS and len(changes.get("data", b"")) <= INLINE_MAX:
            self.entries[key] = replace(entry, **changes).encoded()
            return
        record = Entry(entry.data, entry.put_at, entry.not_before, entry.group)
        record.attempts = entry.attempts
        record.key_id = self._key_id(key)
        if entry.item_key is not None:
            record.item_key = entry.item_key
            if entry.remember is not None:
                record.remember = entry.remember
        for name, changed in changes.items():
            setattr(record, name, changed)
        self.entries[key] = record

    def fence_entry(self, key: Any) -> None:
        """Write entry ``key`` in the commit being made, so that a change to it racing this
        one conflicts (an inline entry is in its bucket, which the caller's change writes)."""
        value = self._stored(key)
        if isinstance(value, Entry):
            value._p_changed = True

    def vouch(self, key: Any, entry: StoredEntry) -> None:
        """Raise :class:`~ackqueue.DamagedFileError` unless ``entry`` (loaded here) is the
        entry stored under ``key``: the tree's reference to a record may have been damaged
        into one to another record, which loads as well (an inline entry has no reference)."""
        stored = entry.key_id
        if stored is None or stored == self._key_id(key):
            return
        assert isinstance(entry, Entry)  # only a record has a key_id
        raise DamagedFileError(damaged_message(self.stored_in(), (
            f"an entry tree refers under key {key!r} to record {oid_repr(entry._p_oid)}, "
            f"which is the entry of key {stored!r}: the reference is damaged"
        )))

    def stored_in(self) -> str:
        """The file (or storage) this record is in, as errors name it."""
        db = self._p_jar.db()
        return str(getattr(db, "where", "") or db.storage.getName())

    def _key_id(self, key: Any) -> Any:
        return key[1] if self.kind == "priority" else key  # a priority key is (item, seq)

    def drop_entry(self, key: Any) -> int | None:
        """Delete entry ``key`` and its due time (KeyError if it is not stored); the count
        and its item key are the caller's. The size of an inline entry (bytes of its bucket's
        old revision that are garbage now, or once the entry log's batch is applied), or None
        for a record of its own (garbage whole).

        Through the entry log where the connection has one (see :class:`EntryLog`), for an
        entry of one tree that no other index names (no due time, no key: a reader going
        from the delay or key index to the entry must find it while the index names it): the
        deletion is recorded in the commit's metadata and made in the tree with the log's
        next batch."""
        entries = self.entries
        log = self._entry_log()
        if log is not None:
            value = self._stored(key)
            delayed = self.delayed
            if (
                self.kind != "priority"
                and not isinstance(entries, ShardedEntries)
                and (delayed is None or key not in delayed)
                and (self.keyed is None or self._an_entry(key, value).item_key is None)
                and log.drop(self, key)
            ):
                if self.format_version < LOGGED_DROPS_FORMAT:
                    self.format_version = LOGGED_DROPS_FORMAT  # older versions would show it
                return len(value) if isinstance(value, bytes) else None
        value = entries.pop(key)
        if isinstance(entries, ShardedEntries):
            entries.retire_empty(key, self.seq_reserved)
        delayed = self.delayed
        if delayed is not None and key in delayed:
            del delayed[key]
        return len(value) if isinstance(value, bytes) else None

    def apply_logged_drops(self, keys: Iterable[Any]) -> None:
        """Delete from the tree the entries of ``keys`` still in it: a batch of deletions the
        entry log recorded (see :class:`EntryLog`; inside a change of the writer)."""
        entries = self.entries
        for key in keys:
            entries.pop(key, None)

    def retire_empty_shards(self) -> int:
        """Delete the emptied shards near the head that no put can be using any more (see
        :meth:`ShardedEntries.retire_empty`); how many. Nothing for a record of one tree."""
        entries = self.entries
        if not isinstance(entries, ShardedEntries):
            return 0
        return entries.retire_empty(None, self.seq_reserved)

    def entry_damage(self) -> str | None:
        """What is wrong with the stored entries, if they are out of order or their tree
        does not hold together (see :func:`tree_damage`); None if they are sound."""
        entries = self.entries
        return entries.damage() if isinstance(entries, ShardedEntries) else tree_damage(entries)

    def salvageable_entries(self, unreadable: list[str]) -> Iterator[StoredEntry]:
        """Every entry that can still be read, node by node: a node of the tree that cannot
        be read costs only its own entries (iterating the tree would stop at it); why each
        such node could not be read is added to ``unreadable``, and so is each entry found
        under another key than its own (a damaged reference: see :meth:`vouch`) and each
        inline one whose header is damaged."""
        hidden = self._hidden()
        for key, entry in _entries_of(self.entries, unreadable):
            if hidden and key in hidden:
                continue
            if isinstance(entry, bytes):
                try:
                    yield inline_entry(entry)
                except ValueError as exc:
                    unreadable.append(f"the entry of key {key!r}: {exc}, left out")
                continue
            try:
                stored = entry.key_id
            except Exception:  # the caller reads it, and says why it cannot
                yield entry
                continue
            if stored is not None and stored != self._key_id(key):
                unreadable.append(
                    f"record {oid_repr(entry._p_oid)} is the entry of key {stored!r} but is "
                    f"found under key {key!r}: a damaged reference, left out"
                )
                continue
            yield entry

    def dead_count(self) -> int:
        """How many dead letters are stored."""
        length = self.dead_length
        return int(length()) if length is not None else 0

    def reserve_seq(self, seq: int) -> None:
        """Make sure no later session hands out ``seq`` again."""
        if seq >= self.seq_reserved:
            self.seq_reserved = seq + SEQ_BLOCK

    def dead_tree(self) -> Any:
        if self.dead is None:
            self.dead = LOBTree()
            self.dead_length = Length()
        return self.dead

    def mark_grouped(self) -> None:
        """An entry with a group is stored (inside a change): from now on the ready index must
        know groups at open. The pause index is made now, with nothing in it, so that a take
        reading a group's pause as current (:meth:`paused_until`) reads it, not this record,
        which other edits write (the queue's own pause has a count of its own to read:
        :meth:`queue_paused`)."""
        self.grouped = True
        if self.group_pauses is None:
            self.group_pauses = OOBTree()

    def queue_paused(self, current: bool = False) -> bool:
        """Whether the whole queue is paused (``q.pause()``). ``current``: read inside a take's
        commit, which then fails if a pause or resume commits first (ZODB's ``readCurrent``
        of :attr:`pause_changes`, which :meth:`set_paused` always moves; of this record if a
        shared open has not made it yet)."""
        paused = bool(self.paused)
        if current:
            changes = self.pause_changes
            read = self if changes is None else changes
            if changes is not None:
                changes()  # loaded: readCurrent needs it
            if read._p_jar is not None and read._p_oid is not None:  # (not new)
                read._p_jar.readCurrent(read)
        return paused

    def set_paused(self, paused: bool) -> None:
        """Pause the queue, or resume it, inside a change (see :meth:`queue_paused`)."""
        if self.paused != paused:
            self.paused = paused
            if self.pause_changes is not None:
                self.pause_changes.change(1)

    def mark_shared(self) -> None:
        """Opened in shared mode (inside a change): make :attr:`pause_changes` if missing."""
        if self.pause_changes is None:
            self.pause_changes = Length()

    def paused_until(self, group: str, current: bool = False) -> float | None:
        """Until when ``group`` is paused (None: it is not, or never was). ``current``: read
        inside a take's commit, which then fails if a pause commits first (ZODB's
        ``readCurrent`` of what :meth:`set_pause` always writes: the index's own record, or
        this record while there is no index)."""
        pauses = self.group_pauses
        until = None if pauses is None else pauses.get(group)  # loaded: readCurrent needs it
        read = self if pauses is None else pauses
        if current and read._p_jar is not None and read._p_oid is not None:  # (not new)
            read._p_jar.readCurrent(read)
        return None if until is None else float(until)

    def set_pause(self, group: str, until: float | None) -> None:
        """Pause ``group`` until ``until`` (None: resume it), inside a change. The index's own
        record is written even when the change is in one of its buckets, so that a take that
        read the pause (:meth:`paused_until`) and commits after it conflicts and looks again."""
        if until is None and (self.group_pauses is None or group not in self.group_pauses):
            return
        if self.group_pauses is None:
            self.group_pauses = OOBTree()
        pauses = self.group_pauses
        if until is None:
            del pauses[group]
        else:
            pauses[group] = until
        pauses._p_changed = True

    def group_setting_index(self) -> Any:
        if self.group_settings is None:
            self.group_settings = OOBTree()
        return self.group_settings

    def group_turn_index(self) -> Any:
        if self.group_turns is None:
            self.group_turns = OOBTree()
        return self.group_turns

    def turn(self, group: str | None) -> float:
        """The last delivery of ``group`` (None: the items put without one), or -inf."""
        if group is None:
            last = self.ungrouped_turn
        else:
            last = self.group_turns.get(group) if self.group_turns is not None else None
        return float("-inf") if last is None else float(last)

    def set_turn(self, group: str | None, now: float) -> None:
        """Record a delivery of ``group`` at ``now`` (inside a take's change): takes of one
        group at once write one value, and conflict."""
        if group is None:
            self.ungrouped_turn = now
        else:
            self.group_turn_index()[group] = now

    def key_index(self) -> Any:
        if self.keyed is None:
            self.keyed = self._new_index(OOBTree)
        return self.keyed

    def seen_set(self) -> Any:
        if self.seen is None:
            self.seen = self._new_index(OOBTree)
        return self.seen

    def delay_index(self) -> Any:
        if self.delayed is None:
            self.delayed = OOBTree() if self.kind == "priority" else self._new_index(LOBTree)
        return self.delayed

    def _new_index(self, tree_class: type) -> Any:
        """A new index of keys or entry keys: in shards where the entries are (format 5: a
        queue made in shared mode), else one tree."""
        if not isinstance(self.entries, ShardedEntries):
            return tree_class()
        if self.format_version < INDEX_FORMAT:
            self.format_version = INDEX_FORMAT  # older versions must not misread the index
        return ShardedIndex(tree_class)


# What every stored record of a class holds, whatever the version that wrote it: a loaded state
# without one of them was damaged (a changed byte in an attribute's name still unpickles).
STORED_ATTRIBUTES: dict[type, frozenset[str]] = {
    PersistentMapping: frozenset({"data"}),  # the database root (or "_container": see below)
    Entry: frozenset({"data", "put_at", "attempts"}),
    DeadRecord: frozenset({"key", "data", "put_at", "attempts", "reason", "when"}),
    QueueRecord: frozenset({"kind", "entries", "length", "seq_reserved"}),
    ShardedEntries: frozenset({"shards", "lifo"}),
    EntryShard: frozenset({"tree", "block", "retired"}),
    ShardedIndex: frozenset({"shards"}),
}


def _stored_names(cls: type) -> frozenset[str]:
    defaults = {n for n, v in vars(cls).items() if not n.startswith("_") and not callable(v)}
    return frozenset(defaults) | STORED_ATTRIBUTES[cls]


# Every attribute a queue's record may hold (a class default, or set by __init__): one that is
# a byte away from one of them is that one, damaged (read as missing, it would strand items).
NAMED_ATTRIBUTES: dict[type, frozenset[str]] = {QueueRecord: _stored_names(QueueRecord)}
CHECKED_STATES = frozenset({*STORED_ATTRIBUTES, Length})  # the classes state_damage checks


def edge_loaded(tree: T) -> T:
    """``tree`` (a stored BTree), its last internal nodes loaded: safe to search a range of.

    BTrees' C range search (``keys()``, ``items()``, ``values()``, iterating, each of them with
    a ``min`` but no ``max`` too) walks down to the last bucket without checking that each
    internal node on the way could be loaded: when one cannot (a lost ZEO connection, a
    damaged record), the process aborts (BTrees 6.5, ``BTree_rangeSearch``:
    ``assert(highbucket != NULL)``; a NULL dereference where assertions are compiled out).
    Loading them here first raises that load's own error instead (a tree of two levels has
    none: its last child is a bucket, which the search loads checking the outcome).
    """
    if isinstance(tree, (ShardedEntries, ShardedIndex)):
        return tree  # its walks load each tree's edge as they come to it
    node: Any = tree
    while isinstance(node, Persistent):  # not a plain dict standing in for an absent tree
        state = node.__getstate__()  # loads the node, raising if it cannot be loaded
        if not state:
            return tree  # empty
        last = state[0][-1]  # (child, key, child, ..., child), or (a bucket's state inline,)
        if type(last) is not type(node):
            return tree  # a bucket, or a bucket's state
        node = last
    return tree


def tree_damage(tree: Any) -> str | None:
    """What is wrong with the stored BTree ``tree``, if its keys are out of order (a changed
    byte in a key still unpickles, and a lookup then misses it) or BTrees' own check of its
    nodes fails; None if the tree is sound."""
    previous: Any = None
    try:
        for n, key in enumerate(edge_loaded(tree).keys()):
            if n and not previous < key:
                return f"is out of order (key {key!r} after {previous!r})"
            previous = key
    except RuntimeError as exc:  # BTrees' iteration met a bucket chain that is no chain
        return f"does not hold together ({exc})"
    try:
        tree._check()
    except AssertionError as exc:
        return f"does not hold together ({exc})"
    return None


def _entries_of(node: Any, unreadable: list[str]) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, ShardedEntries):
        for number, shard in _entries_of(node.shards, unreadable):
            try:
                tree = shard.tree
            except Exception as exc:
                unreadable.append(f"shard {number}: {exc}")
                continue
            yield from _entries_of(tree, unreadable)
        return
    try:
        node._p_activate()
        state = node.__getstate__()
    except Exception as exc:
        unreadable.append(str(exc))
        return
    if state is None:
        return
    if type(node).__name__.endswith("Bucket"):
        yield from zip(state[0][0::2], state[0][1::2], strict=False)  # damage: odd length
        return
    children = state[0]
    if len(children) == 1 and isinstance(children[0], tuple):  # a small tree's one bucket,
        items = children[0][0]  # inline: its state, (items,)
        yield from zip(items[0::2], items[1::2], strict=False)
        return
    for child in children[0::2]:
        yield from _entries_of(child, unreadable)


@dataclass(frozen=True)
class UnreadableEntry:
    """Stands in for a stored entry whose record names what no queue file holds (see
    :func:`restricted_class_factory`): nothing of it was loaded, so nothing of it is known."""

    error: str
    data: bytes = b""
    put_at: float = math.inf  # never the oldest
    attempts: int = 0
    not_before: float = 0.0
    group: str | None = None
    item_key: bytes | None = None
    done = False


def readable_entries(
    record: QueueRecord,
) -> Iterator[tuple[Any, StoredEntry | UnreadableEntry]]:
    """``(key, entry)`` of every stored entry not marked done, in delivery order, loaded; an
    entry whose record names what no queue file holds comes as an :class:`UnreadableEntry`."""
    for key, entry in record.entry_items():
        if isinstance(entry, Entry):
            try:
                entry._p_activate()
            except Exception as exc:
                unsafe = unsafe_record(exc)
                if unsafe is None:
                    raise
                yield key, UnreadableEntry(unsafe_record_named(entry, unsafe))
                continue
        if not entry.done:  # acked in shared mode, not swept yet
            yield key, entry


def state_damage(obj: Any) -> str | None:
    """What is wrong with the state just loaded into ``obj`` (of a class in
    :data:`CHECKED_STATES`), which unpickled: an attribute every record of its class holds is
    missing, one is named a byte away from its name, or a count is not a number."""
    if isinstance(obj, Length):
        value = obj.value
        return None if isinstance(value, int) else f"its count is {type(value).__name__}"
    state = obj.__dict__.keys()
    if isinstance(obj, PersistentMapping) and "_container" in state:
        return None  # the name persistent's mapping used before it was "data"
    required = STORED_ATTRIBUTES[type(obj)]
    if not required <= state:
        return f"its state has no {', '.join(sorted(required - state))}"
    named = NAMED_ATTRIBUTES.get(type(obj), frozenset())
    for name in state - named if named else ():
        meant = [n for n in named if a_byte_apart(n, name)]
        if meant:
            return f"its state names {name!r}, which is {meant[0]!r} damaged"
    return None


def garbled_root_key(root: Any) -> str | None:
    """The key of a database root without ackqueue's own that is a byte away from it: that
    key, damaged (else the queues would look gone, and a new empty queue be made)."""
    if ROOT_KEY in root:
        return None
    return next((k for k in root if isinstance(k, str) and a_byte_apart(k, ROOT_KEY)), None)


def a_byte_apart(one: str, other: str) -> bool:
    """Whether ``one`` is ``other`` with one byte changed (what a damaged name looks like)."""
    return len(one) == len(other) and sum(a != b for a, b in zip(one, other, strict=True)) == 1


def queues_of(root: Any, create: bool) -> Any:
    """The mapping of queue names to records in a database root (None if absent)."""
    queues = root.get(ROOT_KEY)
    if queues is None and create:
        queues = root[ROOT_KEY] = OOBTree()
    return queues


# The modules whose persistent classes a queue file may name. ZODB's root is persistent's
# PersistentMapping; every other record is a class of this module, of BTrees, or a shared-mode
# session (ackqueue.shared.sessions.SessionRecord, a module path of the file format too).
_ALLOWED_PACKAGES = ("BTrees", "persistent")
_ALLOWED_MODULES = frozenset({__name__, "ackqueue.shared.sessions"})
# The classes found so far: every reference in a record names its class, so a tree node of 16
# entries asks 16 times.
_allowed: dict[tuple[str, str], type[Persistent]] = {}


class GarbledClassName(UnsafeRecordError):
    """A record names a class that no module could hold (not a dotted name), or one that the
    modules ackqueue writes do not have: a changed byte, nothing another writer would gain by.
    The database's connection reports it as damage (storage/engine.py)."""


def garbled_class_name(module: str, name: str) -> bool:
    """Whether ``module.name``, which names no class, is a name ackqueue wrote with a byte
    changed: not a dotted name at all, or in a package whose classes ackqueue's records name
    (the caller found no such class there) or one a byte away from such a package's name, or
    a byte away from a module of those packages ("BTrees4OOBTree": its dot changed; "BT" and
    "ees.LOBTree": a letter of "BTrees.LOBTree" changed into the newline that ends a module's
    name in a pickle), or the end of one ("kqueue.records": the pickle read out of step)."""
    package = module.partition(".")[0]
    ours = (*_ALLOWED_PACKAGES, "ackqueue")
    return (
        package in ours
        or any(a_byte_apart(package, one) for one in ours)
        or not all(part.isidentifier() for part in f"{module}.{name}".split("."))
        or any(
            a_byte_apart(module, loaded)
            or a_byte_apart(f"{module}.{name}", loaded)
            or ("." in module and loaded.endswith(module) and len(loaded) - len(module) <= 3)
            for loaded in list(sys.modules)
            if loaded.partition(".")[0] in ours
        )
    )


def restricted_class_factory(connection: Any, module: str, name: str) -> type[Persistent]:
    """The class factory of a database that a queue with a serializer other than pickle uses
    (``ZODB.DB(class_factory=)``): a record may name only a persistent class of ackqueue's
    records, BTrees or persistent.

    Anything else (a function such as ``os.system``, a class of another module) raises
    :class:`~ackqueue.UnsafeRecordError` before it is imported or called, so loading a record
    of an untrusted file runs none of its code. Give it to ``ZODB.DB`` to use ``db=`` with a
    serializer other than pickle.
    """
    found = _allowed.get((module, name))
    if found is not None:
        return found
    package = module.partition(".")[0]
    if module in _ALLOWED_MODULES or package in _ALLOWED_PACKAGES:
        try:
            candidate = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            candidate = None
        if isinstance(candidate, type) and issubclass(candidate, Persistent):
            _allowed[module, name] = candidate
            return candidate
    if garbled_class_name(module, name):
        raise GarbledClassName(
            f"names {module}.{name}, which is no class (ackqueue writes only names of "
            "its own, BTrees' and persistent's classes)"
        )
    raise UnsafeRecordError(
        f"a stored record names {module}.{name}, which is not a persistent class of "
        f"ackqueue, BTrees or persistent: a queue file holds no other, so this record was not "
        f"written by ackqueue; nothing of it was loaded or run"
    )


class _PlainDataUnpickler(pickle.Unpickler):
    """Loads plain data only: a pickle that names any global (a function, a class) or
    refers to a record is refused before anything of it is imported or called."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafeRecordError(
            f"names {module}.{name}, which ackqueue never writes there (its metadata is "
            "plain data: names and numbers)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeRecordError("refers to a record, which ackqueue never writes there")


def transaction_metadata(data: bytes) -> dict[str, Any]:
    """A transaction's metadata (``extension_bytes``: where ackqueue records each commit's
    change of its counts, see storage/counts.py), loaded as plain data only.

    ZODB loads it with an unrestricted pickle loader, so a file from elsewhere whose metadata
    names ``os.system`` ran it as soon as anything read the metadata: an open after an
    unclean stop, ``ackqueue stats``, the private server serving a shared-mode opener. Here
    such metadata raises :class:`~ackqueue.UnsafeRecordError` instead, whatever the queue's
    serializer. A pickle that is not whole raises the unpickler's own error."""
    if not data:
        return {}
    loaded = _PlainDataUnpickler(io.BytesIO(data)).load()
    if not isinstance(loaded, dict):
        raise UnsafeRecordError(f"is a {type(loaded).__name__}, not the mapping ZODB writes")
    return loaded


def unsafe_record(exc: BaseException) -> UnsafeRecordError | None:
    """The refusal of :func:`restricted_class_factory` that caused ``exc``, if one did (ZODB
    raises its own ``StateLoadError`` from it when a record's state cannot load)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, UnsafeRecordError):
            return cause
        cause = cause.__cause__
    return None


def loads(obj: Persistent | InlineEntry) -> bool:
    """Whether ``obj``'s record loads: False for one that names what no queue file holds,
    which a scan passes over (a get that reaches such an entry moves it to the dead letters).
    An inline entry was read with its bucket."""
    if isinstance(obj, InlineEntry):
        return True
    try:
        obj._p_activate()
    except Exception as exc:
        if unsafe_record(exc) is None:
            raise
        return False
    return True


def unsafe_record_named(obj: Persistent, unsafe: UnsafeRecordError) -> str:
    """The refusal, naming ``obj``'s record unless the database's connection already did."""
    text = str(unsafe)
    return text if text.startswith("record ") else f"record {oid_repr(obj._p_oid)}: {text}"
