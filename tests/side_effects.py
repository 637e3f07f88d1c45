"""Globals with a side effect, for crafted records: loading one of them leaves a marker file.

A test stores a record whose state names one of these (or ``os.system``) and checks that
opening, reading and consuming the queue leaves no marker: nothing of the record was run.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import ZODB
import ZODB.FileStorage
from ZODB.Connection import TransactionMetaData

from ackqueue.records import Entry, inline_entry


def touch(path: str) -> str:
    """Write the marker file ``path``: whoever calls this ran the crafted record's code."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("ran")
    return path


class Trap:
    """A class whose construction writes the marker file it is given."""

    def __init__(self, path: str) -> None:
        touch(path)


class Call:
    """Pickles as a call of ``fn(*args)``: what a crafted pickle runs when it is loaded."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.fn, self.args


def targets(marker: str) -> dict[str, Call]:
    """Crafted values by name, each writing ``marker`` when an unrestricted loader loads it."""
    return {
        "os.system": Call(os.system, f"touch {marker}"),
        "a test module's function": Call(touch, marker),
        "a test module's class": Call(Trap, marker),
    }


def craft(path: str, change: Any) -> None:
    """Change the stored records of ``path`` through ZODB's own, unrestricted loader, as a
    file from elsewhere could have them: ``change(root["ackqueue"])``."""
    db = ZODB.DB(ZODB.FileStorage.FileStorage(path))
    try:
        with db.transaction() as conn:
            change(conn.root()["ackqueue"])
    finally:
        db.close()


def as_records(record: Any, keys: Any = None) -> None:
    """Make the inline entries of queue ``record`` (all, or those under ``keys``) records of
    their own, as a file of format 2 or a shared queue keeps every entry: a crafted or damaged
    record needs one (``record`` is loaded through :func:`craft`)."""
    entries = record.entries
    for key in list(entries.keys()) if keys is None else keys:
        value = entries[key]
        if isinstance(value, bytes):
            inline = inline_entry(value)
            entry = Entry(inline.data, inline.put_at, inline.not_before, inline.group)
            entry.attempts = inline.attempts
            if inline.item_key is not None:
                entry.item_key, entry.remember = inline.item_key, inline.remember
            entry.key_id = key[1] if record.kind == "priority" else key
            entries[key] = entry


def entries_as_records(path: str, name: str = "default") -> None:
    """:func:`as_records` of every entry of queue ``name`` in the file ``path``."""
    craft(path, lambda queues: as_records(queues[name]))


def poison_first_entry(path: str, value: Any, name: str = "default") -> None:
    """Set the ``data`` of queue ``name``'s first entry (made a record of its own) to
    ``value`` (a :class:`Call`)."""

    def poison(queues: Any) -> None:
        record = queues[name]
        first = record.entries.minKey()
        as_records(record, [first])
        record.entries[first].data = value

    craft(path, poison)


def runs_when_trusted(path: str, marker: str, name: str = "default") -> bool:
    """Whether loading the first entry of ``path`` with ZODB's default loader writes
    ``marker`` (the crafted record is a real threat); the marker is removed again."""
    db = ZODB.DB(ZODB.FileStorage.FileStorage(path, read_only=True))
    try:
        entries = db.open().root()["ackqueue"][name].entries
        entries[entries.minKey()].data  # noqa: B018  (loading is the point)
    finally:
        db.close()
    return ran(marker)


def ran(marker: str) -> bool:
    """Whether the crafted code ran (``marker`` exists); the marker is removed again."""
    found = os.path.exists(marker)
    if found:
        os.remove(marker)
    return found


def craft_metadata(path: str, value: Any) -> None:
    """Append to ``path`` a commit whose transaction metadata holds ``value`` where ackqueue
    records its counts' changes: what another writer of the file could leave for the next
    reader of the count log."""
    append_commit(path, {"ackqueue.counts": value})


def append_commit(path: str, metadata: dict[str, Any]) -> None:
    """Append to the file ``path`` a commit of ``metadata`` only (no record), pickled as ZODB
    pickles transaction metadata."""
    storage = ZODB.FileStorage.FileStorage(path)
    try:
        txn = TransactionMetaData(extension=pickle.dumps(metadata, 3))
        storage.tpc_begin(txn)
        storage.tpc_vote(txn)
        storage.tpc_finish(txn)
    finally:
        storage.close()


def metadata_runs_when_trusted(path: str, marker: str) -> bool:
    """Whether reading the transaction metadata of ``path`` with ZODB's own loader writes
    ``marker`` (the crafted metadata is a real threat); the marker is removed again."""
    storage = ZODB.FileStorage.FileStorage(path, read_only=True)
    try:
        for txn in storage.iterator():
            txn.extension  # noqa: B018  (loading is the point)
    finally:
        storage.close()
    return ran(marker)
