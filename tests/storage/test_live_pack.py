"""ackqueue's packer (``live_packer`` in filestorage.py) writes the packed copy FileStorage's
own packer writes, byte for byte, from the live records instead of from every transaction; and
costs what the live data costs, not what the history does."""

import os
import random
import time

import pytest
import transaction
import ZODB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from persistent.mapping import PersistentMapping
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.FileStorage import RedundantPackWarning
from ZODB.FileStorage.format import FileStorageFormatter
from ZODB.POSException import UndoError
from ZODB.serialize import referencesf
from ZODB.utils import p64, u64

import ackqueue
from ackqueue.storage.filestorage import live_packer

OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "nest", "change", "drop", "link", "undo", "pack", "swap"]),
        st.integers(0, 7),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=40,
)


def packed_by(packer, storage, stop, gc):
    """What ``packer`` makes of ``storage`` packed to ``stop``: "redundant", None (nothing
    to free), an error, or (end, index as a dict, the packed copy's bytes); the storage is left
    as it was."""
    try:
        result = packer(storage, referencesf, stop, gc)
    except RedundantPackWarning as declined:
        return "redundant", str(declined)
    except Exception as exc:  # fspack's copy of undone commits after the pack time can fail
        if os.path.exists(storage._file_name + ".pack"):
            os.remove(storage._file_name + ".pack")
        return type(exc).__name__, str(exc)
    if result is None:
        assert not os.path.exists(storage._file_name + ".pack")
        return None
    storage._commit_lock.release()  # the packer returns holding it, for FileStorage.pack
    end, index = result
    with open(storage._file_name + ".pack", "rb") as f:
        data = f.read()
    os.remove(storage._file_name + ".pack")
    return end, dict(index.items()), data


def play(db, storage, ops, tids):
    """Commit ``ops`` against a root of persistent mappings (some nested, some shared, some
    dropped, some commits undone: back pointers and undone creations), recording each tid."""
    conn = db.open()
    root = conn.root()
    for what, a, b in ops:
        if what == "add":
            root[a] = PersistentMapping(v=b)
        elif what == "nest" and a in root:
            root[a][b] = PersistentMapping(v=-b)
        elif what == "change" and a in root:
            root[a]["v"] = root[a].get("v", 0) + 1
        elif what == "drop":
            root.pop(a, None)
        elif what == "link" and a in root:
            root[b] = root[a]
        elif what == "swap" and a in root and b in root:
            root[a], root[b] = root[b], root[a]
        elif what == "undo" and tids:
            # Not the root's creation: with no root, ZODB's packer fails its own way.
            undoable = [u for u in db.undoLog(0, 20) if u["id"] in tids]
            if undoable:
                db.undo(undoable[a % len(undoable)]["id"])
        elif what == "pack":
            transaction.commit()
            db.pack(time.time())  # through FileStorage.pack: the packed prefix ('p')
            continue
        try:
            transaction.commit()
        except UndoError:
            transaction.abort()
            continue
        if storage.lastTransaction() not in tids:
            tids.append(storage.lastTransaction())
    conn.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, more=OPS, gc=st.booleans(), data=st.data())
def test_the_packed_copy_is_fspacks_byte_for_byte(tmp_path_factory, ops, more, gc, data):
    path = os.path.join(tmp_path_factory.mktemp("live"), "d.fs")
    storage = FileStorage(path, packer=live_packer)
    db = ZODB.DB(storage)
    tids = []
    try:
        play(db, storage, ops, tids)
        play(db, storage, more, tids)
        transaction.abort()
        last = u64(storage.lastTransaction())
        stops = [p64(u64(t) + d) for t in tids for d in (-1, 0)] + [p64(last + 1)]
        for stop in data.draw(st.lists(st.sampled_from(stops), min_size=1, max_size=4)):
            theirs = packed_by(FileStorage.packer, storage, stop, gc)
            ours = packed_by(live_packer, storage, stop, gc)
            assert ours == theirs
    finally:
        db.close()


def test_a_queue_packed_by_ackqueue_keeps_every_item_and_its_state(tmp_path):
    """Items put, held, acked, dead and keyed, over packs made while it runs: the same after
    a reopen as a queue that never packed."""
    path = os.path.join(tmp_path, "q.fs")
    rng = random.Random(7)
    with ackqueue.AckQueue(path) as q:
        q._store.packer.min_bytes = 16 * 1024
        c = q.connect()
        expected = []
        for i in range(1500):
            q.put(i)
            expected.append(i)
            if rng.random() < 0.6:
                got = c.get_nowait()
                expected.remove(got)
                c.ack(got)
        held = c.get_nowait()
        packs = q._store.packer.packs
    assert packs >= 5
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == len(expected)
        assert [q.get_nowait() for _ in range(len(expected))] == expected
        assert held in expected  # given back when its connection went away


@pytest.mark.parametrize("acked", [0, 2900])
def test_its_cost_follows_the_live_data_not_the_history(tmp_path, monkeypatch, acked):
    """3,000 puts (and most of them acked): FileStorage's packer reads every transaction, ours
    the live records. Measured, not timed: the transaction headers each reads."""
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        c = q.connect()
        for i in range(3000):
            q.put(i)
        for _ in range(acked):
            c.ack(c.get_nowait())
    read = FileStorageFormatter._read_txn_header
    counted = []

    def counting(self, *args, **kw):
        counted.append(1)
        return read(self, *args, **kw)

    monkeypatch.setattr(FileStorageFormatter, "_read_txn_header", counting)
    storage = FileStorage(path)
    reads = {}
    try:
        for name, packer in (("fspack", FileStorage.packer), ("live", live_packer)):
            del counted[:]
            packed_by(packer, storage, p64(u64(storage.lastTransaction()) + 1), True)
            reads[name] = len(counted)
    finally:
        storage.close()
    assert reads["fspack"] >= 2 * (3000 + acked)  # each transaction, twice
    # One per transaction holding a live record (a tree bucket of 16 items or fewer, the
    # queue's records), and the look back from the end.
    assert reads["live"] <= (3000 - acked) // 8 + 20


def committed_dict(db, **values):
    """A root entry per value, each a persistent mapping, committed; the tid."""
    conn = db.open()
    for name, value in values.items():
        conn.root()[name] = PersistentMapping(v=value)
    transaction.commit()
    conn.close()
    return db.storage.lastTransaction()


def test_an_object_whose_oid_was_taken_before_the_pack_time_and_stored_after_it(tmp_path):
    """Oids are not stored in their order (two connections, or ZEO clients each with a batch
    of oids): an object created after the pack time may come before live ones in the index.
    Everything before the pack time is kept all the same."""
    storage = FileStorage(os.path.join(tmp_path, "d.fs"), packer=live_packer)
    db = ZODB.DB(storage)
    try:
        committed_dict(db, holder=0)
        late_tm = transaction.TransactionManager()
        late = db.open(late_tm)
        late_obj = PersistentMapping(v="late")
        late.add(late_obj)  # its oid is taken now
        committed_dict(db, a=1, b=2)
        committed_dict(db, a=3)  # garbage: the pack has something to free
        stop = storage.lastTransaction()
        late.root()["holder"]["late"] = late_obj
        late_tm.commit()
        late.close()
        conn = db.open()
        assert u64(late_obj._p_oid) < u64(conn.root()["b"]._p_oid)
        conn.close()
        theirs = packed_by(FileStorage.packer, storage, stop, True)
        ours = packed_by(live_packer, storage, stop, True)
        assert isinstance(ours, tuple) and len(ours) == 3
        assert ours == theirs
    finally:
        db.close()


@pytest.mark.parametrize("when", ["before the pack time", "after the pack time"])
def test_an_index_that_points_an_object_at_anothers_record_is_refused(tmp_path, when):
    """The copy is made from FileStorage's index: an entry pointing at another object's record
    (an index file gone wrong) stops the pack with FileStorage's error for a damaged record,
    instead of writing a copy without the object."""
    storage = FileStorage(os.path.join(tmp_path, "d.fs"), packer=live_packer)
    db = ZODB.DB(storage)
    try:
        committed_dict(db, a=1, b=2)
        committed_dict(db, a=3)  # garbage: the pack has something to free
        stop = storage.lastTransaction()
        if when == "after the pack time":
            committed_dict(db, a=4, b=5)
        conn = db.open()
        a, b = conn.root()["a"]._p_oid, conn.root()["b"]._p_oid
        conn.close()
        storage._index[a] = storage._index[b]
        ours = packed_by(live_packer, storage, stop, True)
        assert ours[0] == "CorruptedDataError", ours
        assert not os.path.exists(storage._file_name + ".pack")
    finally:
        db.close()


@pytest.mark.parametrize("status", [b"X", b"c", b"?"])
@pytest.mark.parametrize("which", ["the last before the pack time", "one after it"])
def test_a_damaged_transaction_it_reads_is_refused_as_fspack_refuses_it(tmp_path, status, which):
    """The transactions after the pack time, and the last one before it, which the packer
    reads to find where the pack time falls. (Damage in a transaction none of whose records
    are live any more is not read, so not seen: FileStorage's packer refused to pack then.)"""
    storage = FileStorage(os.path.join(tmp_path, "d.fs"), packer=live_packer)
    db = ZODB.DB(storage)
    try:
        committed_dict(db, a=1)
        committed_dict(db, a=2)
        committed_dict(db, a=3)
        stop = storage.lastTransaction()
        if which == "one after it":
            committed_dict(db, a=4)
            stop = p64(u64(stop) + 1)
        last = storage._pos
        with open(storage._file_name, "r+b") as f:  # the status of the last transaction
            f.seek(last - 8)
            tlen = u64(f.read(8))
            f.seek(last - 8 - tlen + 16)
            f.write(status)
        theirs = packed_by(FileStorage.packer, storage, stop, True)
        ours = packed_by(live_packer, storage, stop, True)
        assert theirs[0] == ours[0] == "CorruptedError", (theirs, ours)
    finally:
        db.close()
