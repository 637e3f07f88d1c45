"""QueueFileStorage answers the conflict check of a store, and ``getTid``, from the headers of
records it wrote itself; a real conflict must still be seen, also across a pack."""

from __future__ import annotations

import time

import pytest
import transaction
import ZODB
from BTrees.Length import Length
from persistent.mapping import PersistentMapping
from ZODB.FileStorage.format import FileStorageFormatter
from ZODB.POSException import ConflictError

from ackqueue.storage import filestorage
from ackqueue.storage.filestorage import QueueFileStorage


class Plain(PersistentMapping):
    """No conflict resolution, so that a concurrent change must raise."""


def open_db(tmp_path):
    return ZODB.DB(QueueFileStorage(str(tmp_path / "h.fs"), pack_keep_old=False))


def test_a_conflicting_store_is_still_refused_when_its_header_is_cached(tmp_path):
    db = open_db(tmp_path)
    try:
        tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
        c1, c2 = db.open(transaction_manager=tm1), db.open(transaction_manager=tm2)
        c1.root()["obj"] = Plain(n=0)
        tm1.commit()
        tm2.begin()
        stale = c2.root()["obj"]
        stale["n"]  # loaded at the first revision
        for n in range(1, 4):  # newer revisions, their headers cached as they are written
            tm1.begin()
            c1.root()["obj"]["n"] = n
            tm1.commit()
        assert db.storage._headers, "nothing was cached: this test proves nothing"
        stale["n"] = -1
        with pytest.raises(ConflictError):
            tm2.commit()
        tm2.abort()
        tm1.begin()
        assert c1.root()["obj"]["n"] == 3
    finally:
        db.close()


def test_after_a_pack_the_cached_positions_are_not_used(tmp_path):
    db = open_db(tmp_path)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        root = conn.root()
        root["garbage"] = [Plain(n=i) for i in range(50)]
        root["count"] = Length()
        root["obj"] = Plain(n=0)
        tm.commit()
        for n in range(20):
            root["obj"]["n"] = n
            root["count"].change(1)
            tm.commit()
        del root["garbage"]
        tm.commit()
        before = db.storage._file
        db.pack(time.time() + 1)
        assert db.storage._file is not before  # the pack swapped the file
        for n in range(20, 40):  # each store checks a record that moved in the pack
            root["obj"]["n"] = n
            root["count"].change(1)
            tm.commit()
        oid = root["obj"]._p_oid
        assert db.storage.getTid(oid) == root["obj"]._p_serial
    finally:
        db.close()
    db = open_db(tmp_path)
    try:
        root = db.open().root()
        assert root["obj"]["n"] == 39 and root["count"]() == 40
    finally:
        db.close()


def test_commits_rewriting_an_object_check_it_without_reading_the_file(tmp_path, monkeypatch):
    """What the cache is for: the conflict check of a store, and ``getTid`` of an object a
    commit only read, answered from the headers of records this storage wrote (a file read
    each was a tenth of an ack's CPU)."""
    reads = []
    read = FileStorageFormatter._read_data_header

    def counted(self, pos, oid=None, _file=None):
        if _file is None:  # the storage's own file: the checks' reads (loads use the pool's)
            reads.append(oid)
        return read(self, pos, oid, _file)

    db = open_db(tmp_path)
    try:
        with db.transaction() as conn:
            conn.root()["obj"] = Plain(n=0)
            conn.root()["other"] = Plain(n=0)
    finally:
        db.close()
    db = open_db(tmp_path)  # reopened: nothing cached
    try:
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        obj, other = conn.root()["obj"], conn.root()["other"]
        other["n"]  # loaded: readCurrent of a ghost records nothing
        monkeypatch.setattr(FileStorageFormatter, "_read_data_header", counted)
        for n in range(1, 50):
            obj["n"] = n
            conn.readCurrent(other)  # never written here: checked with getTid at the vote
            tm.commit()
        # The first checks of each (before the first commit the cache is not the file's yet),
        # not one a commit.
        assert set(reads) <= {obj._p_oid, other._p_oid} and len(reads) <= 4, reads
    finally:
        db.close()


def test_the_cache_keeps_only_the_newest_headers(tmp_path, monkeypatch):
    cache, slack = 64, 16  # HEADER_CACHE and HEADER_SLACK, made small to be quick
    monkeypatch.setattr(filestorage, "HEADER_CACHE", cache)
    monkeypatch.setattr(filestorage, "HEADER_SLACK", slack)
    db = open_db(tmp_path)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(transaction_manager=tm)
        root = conn.root()
        commits = cache + 3 * slack + 5
        for n in range(commits):
            root[n % 7] = Plain(n=n)  # a new record each commit, and the root rewritten
            tm.commit()
            if n >= cache:  # two headers a commit: full since then
                assert cache <= len(db.storage._headers) <= cache + slack, n
        headers = db.storage._headers
        assert headers[max(headers)].oid == root[(commits - 1) % 7]._p_oid  # the newest kept
    finally:
        db.close()
