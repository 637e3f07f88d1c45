"""A damaged queue file says so: which file, which record or offset, and what to do.

FileStorage keeps no checksums, so a changed byte is found only when what it changed is read.
Whatever reads it (an open, a get, ``ackqueue stats``), the error a user gets is a
:class:`~ackqueue.DamagedFileError` that names the file and the record (or the offset ZODB
found) and points to ``ackqueue salvage``, never ZODB's empty ``StateLoadError``, a
``POSKeyError`` or a ``MemoryError``. The campaign (``tests/corruption_campaign.py``) changes one
random byte of a known file at a time and classifies each outcome.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import pickletools
import shutil
import subprocess
import sys
import time

import pytest
import transaction
from conftest import child_argv, child_env
from persistent import Persistent
from persistent.mapping import PersistentMapping
from side_effects import craft, entries_as_records
from ZODB import DB
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage, packed_version
from ZODB.FileStorage.format import DATA_HDR_LEN
from ZODB.POSException import ReadConflictError, StateLoadError
from ZODB.utils import oid_repr, p64, u64

import ackqueue
from ackqueue.cli.commands import main as cli
from ackqueue.storage.engine import new_db

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import corruption_campaign  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRIALS = 500  # per file: about 12 s each on a quiet 2-core machine


@pytest.mark.campaign
@pytest.mark.parametrize("stop", ["closed", "killed"])
def test_random_one_byte_corruptions_give_the_data_or_a_clear_error(tmp_path, stop):
    result = corruption_campaign.run(
        str(tmp_path), ROOT, TRIALS, seed=21, killed=stop == "killed"
    )
    print(f"{stop}: {TRIALS} one-byte corruptions: {result.summary()} ({result.seconds:.0f} s)")
    assert not result.counts["internal"], result.examples["internal"]
    assert not result.counts["loss"], result.examples["loss"]
    # The campaign reached both kinds of outcome: a byte nothing reads, and one that is read.
    assert result.counts["intact"] and result.counts["clear error"], result.counts


def queue_file(tmp_path) -> str:
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(10))
    return path


def record_of(path: str, needle: bytes, last: bool = False) -> int:
    """The offset of the first stored bytes holding ``needle`` (``last``: the last ones, such
    as the current revision of an inline entry's bucket)."""
    with open(path, "rb") as f:
        data = f.read()
        at = data.rfind(needle) if last else data.find(needle)
    assert at > 0
    return at


def stored_oid(path: str, class_name: bytes, own: bool = False) -> bytes:
    """The oid of the first stored object whose record names ``class_name`` (``own``: as
    its class, in the record's first pickle)."""
    storage = FileStorage(path, read_only=True)
    try:
        return next(
            r.oid for t in storage.iterator() for r in t
            if r.data and class_name in (r.data[:class_pickle_end(r.data)] if own else r.data)
        )
    finally:
        storage.close()


def state_of_current_record(path: str, class_name: bytes, own: bool = False) -> int:
    """The offset of the state pickle of the current record of the first object whose
    record names ``class_name`` (``own``: as its class, in the record's first pickle)."""
    oid = stored_oid(path, class_name, own)
    storage = FileStorage(path, read_only=True)
    try:
        pos = storage._lookup_pos(oid) + DATA_HDR_LEN
        data, _serial = storage.load(oid)
    finally:
        storage.close()
    return pos + class_pickle_end(data)


def class_pickle_end(data: bytes) -> int:
    """Where a record's state pickle starts: after the pickle of its class."""
    return [at for op, _arg, at in pickletools.genops(data) if op.name == "STOP"][0] + 1


def test_a_record_that_does_not_unpickle_is_a_damaged_file_error_naming_it(tmp_path):
    path = queue_file(tmp_path)
    state = state_of_current_record(path, b"QueueRecord")
    with open(path, "r+b") as f:  # after PROTO: read a memo entry that was never stored
        f.seek(state + 2)
        f.write(b"h")
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        q.qsize()
    message = str(raised.value)
    assert path in message and "record 0x02 (BTrees.OOBTree.OOBTree)" in message
    assert f"ackqueue salvage {path} --into" in message
    assert isinstance(raised.value.__cause__, StateLoadError)


def test_ackqueue_stats_of_a_file_damaged_after_its_index_says_where(tmp_path, capsys):
    work = queue_file(tmp_path)
    path = str(tmp_path / "killed.fs")
    shutil.copy(work + ".index", path + ".index")  # saved at the last close
    with ackqueue.AckQueue(work) as q:
        for n in range(10):
            q.put(n)
        shutil.copy(work, path)  # what is on disk at a kill -9: the index is older
    storage = FileStorage(work, read_only=True)
    try:
        starts = [t._tpos for t in storage.iterator()]
    finally:
        storage.close()
    with open(path, "r+b") as f:
        f.seek(starts[-5] + 8)  # the high byte of a later transaction's length
        f.write(b"\x7f")
    assert cli(["stats", path]) == 1
    err = capsys.readouterr().err
    assert "is damaged" in err and path in err and " at " in err and "ackqueue salvage" in err


def test_an_item_whose_own_bytes_are_damaged_is_set_aside_saying_so(tmp_path):
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put("first item")
        q.put("second")
    at = record_of(path, b"first item", last=True)
    with open(path, "r+b") as f:
        f.seek(at - 1)  # the string's length byte: the pickle now reads past its end
        f.write(b"\x7f")
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        with pytest.raises(ackqueue.ItemLoadError, match="stored bytes are damaged"):
            c.get_nowait()
        assert c.get_nowait() == "second"
        assert q.dead_count() == 1


class Refusing(Persistent):
    """A record whose own class fails to take its state: a bug, not damage."""

    error: type[Exception] = RuntimeError

    def __setstate__(self, state):
        raise self.error("a bug in __setstate__")


class RefusingType(Refusing):
    error = TypeError  # what BTrees' and persistent's own __setstate__ raise for a bad state


@pytest.mark.parametrize("kind", [Refusing, RefusingType])
def test_a_record_that_reads_back_whole_is_not_called_damaged(tmp_path, kind):
    # Whatever the error, a __setstate__ of a class that is not BTrees' or persistent's may be
    # wrong: not the file's damage.
    path = str(tmp_path / "plain.fs")
    db = new_db(FileStorage(path))
    db.classFactory.restricted = False
    try:
        conn = db.open()
        conn.root()["x"] = kind()
        transaction.commit()
        conn.close()
        db.cacheMinimize()
        other = db.open()
        with pytest.raises(StateLoadError) as raised:
            other.root()["x"]._p_activate()
        assert not isinstance(raised.value, ackqueue.DamagedFileError)
        assert type(raised.value.__cause__) is kind.error
        other.close()
    finally:
        db.close()


def test_the_inert_check_reads_a_whole_pickle_of_any_class_without_loading_it():
    from ackqueue.storage.items import pickle_damage

    whole = pickle.dumps(Refusing.__new__(Refusing), protocol=3)
    assert pickle_damage(io.BytesIO(whole)) is None
    assert pickle_damage(io.BytesIO(whole[:-3])) is not None


def test_salvage_puts_every_item_still_readable_into_a_new_file_and_leaves_the_damaged_one(
    tmp_path, capsys
):
    path = str(tmp_path / "q.fs")
    put = [f"item {n}" for n in range(60)]  # several buckets of the entry tree
    with ackqueue.AckQueue(path) as q:
        for item in put:
            q.put(item, group="host" if item.endswith("7") else None)
    state = state_of_current_record(path, b"LOBucket", own=True)  # a bucket of entries
    with open(path, "r+b") as f:
        f.seek(state + 2)
        f.write(b"h")
    taken = []  # by the gets before the damaged bucket, for good
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        while True:
            taken.append(q.get_nowait())
    assert "LOBucket" in str(raised.value)
    with open(path, "rb") as f:
        damaged = f.read()

    new = str(tmp_path / "new.fs")
    assert cli(["salvage", path, "--into", new]) == 0
    out = capsys.readouterr()
    assert "could not be read" in out.out and "LOBucket" in out.err
    with ackqueue.AckQueue(new) as q:
        got = [q.get_nowait() for _ in range(q.qsize())]
    assert got and set(got) <= set(put) - set(taken)
    assert len(got) + len(taken) < len(put)  # the damaged bucket's entries cannot be read
    assert len(got) == len(set(got))
    with open(path, "rb") as f:
        assert f.read() == damaged  # the damaged file is left as it was, for another try
    assert cli(["salvage", path, "--into", path]) != 0  # never into the damaged file itself


def test_a_damaged_first_byte_is_a_damaged_queue_file_that_salvage_reads_whole(
    tmp_path, capsys
):
    """FileStorage's first bytes a byte off (b"FS30" read b"GS30") are damage, not a foreign
    file: the open says so, and salvage reads the file with them put right, every item."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(["a", "b", "c"])
    with open(path, "r+b") as f:
        f.write(b"G")
    with pytest.raises(ackqueue.DamagedFileError, match="a byte away from FileStorage's") as told:
        ackqueue.AckQueue(path)
    assert path in str(told.value)
    new = str(tmp_path / "new.fs")
    assert cli(["salvage", path, "--into", new]) == 0
    assert "its first bytes (put right in the copy read)" in capsys.readouterr().err
    with ackqueue.AckQueue(new) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == ["a", "b", "c"]
    with open(path, "rb") as f:
        assert f.read(4) == b"G" + packed_version[1:]  # the damaged file is left as it was


@pytest.mark.parametrize("named", ["unloaded", "loaded"])
def test_a_bucket_whose_next_reference_names_an_entry_is_a_damaged_file(tmp_path, named):
    # A changed byte in a bucket's reference to the next bucket can make it name an entry's
    # record. One nothing has loaded yet is loaded as a bucket, and its state fails BTrees'
    # __setstate__ with a SystemError ("new style getargs format but argument is not a
    # tuple"), which ZODB wraps in an empty StateLoadError (the corruption campaign met it);
    # an entry already loaded is taken for the next bucket by BTrees' C iteration, which
    # fails with "the bucket being iterated changed size".
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many(range(40))  # several buckets, each but the last naming the next
    entries_as_records(path)  # as a file of format 2 keeps its entries (or a shared queue)
    with ackqueue.AckQueue(path, autopack=False) as q:
        oids = q._book.read(lambda record: [e._p_oid for _, e in record.entry_items()])
        q.get_nowait()  # item 0: its record stays in the file, named by no bucket
    storage = FileStorage(path, read_only=True)
    try:
        db = DB(storage)
        tree = db.open().root()["ackqueue"]["default"].entries
        bucket = tree.__getstate__()[0][0]._p_oid  # the first: it names the next
        data, _serial = storage.load(bucket)
        at = storage._lookup_pos(bucket) + DATA_HDR_LEN
        db.close()
    finally:
        storage.close()
    next_ref = data.rindex(b"C\x08") + 2  # the last reference of its state: the next bucket
    assert data[next_ref:next_ref + 8] not in oids
    with open(path, "r+b") as f:
        f.seek(at + next_ref)
        # item 0's old record (named by no bucket), or the last item's (its bucket's read)
        f.write(oids[0] if named == "unloaded" else oids[-1])
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        while True:
            q.get_nowait()
    assert f"ackqueue salvage {path}" in str(raised.value)
    assert ("LOBucket" if named == "unloaded" else "entry tree") in str(raised.value)


@pytest.mark.parametrize("n", [3, 16, 40])
def test_salvage_of_a_sound_file_puts_every_item_back_whatever_its_trees_depth(tmp_path, n):
    # A small queue's entry tree keeps its one bucket inline in its own record: salvage read
    # that bucket's state as if it were the items, and put nothing back ("put 0 item(s)").
    path = str(tmp_path / "q.fs")
    put = [f"item {i}" for i in range(n)]
    with ackqueue.AckQueue(path) as q:
        q.put_many(put)
    new = str(tmp_path / "new.fs")
    assert cli(["salvage", path, "--into", new]) == 0
    with ackqueue.AckQueue(new) as q:
        assert sorted(q.get_nowait() for _ in range(q.qsize())) == sorted(put)


def test_sound_records_of_many_level_trees_read_back_whole(tmp_path):
    # ZODB writes a record's class and state with one pickler (memo shared): read apart, the
    # state of nearly every BTree node failed ("Memo value not found"), and any load failing
    # for another reason became a false DamagedFileError (CI, a server restart).
    from BTrees.LOBTree import LOBTree
    from BTrees.OOBTree import OOBTree
    from ZODB import DB
    from ZODB.FileStorage import FileStorage

    from ackqueue.storage.engine import damage_of

    storage = FileStorage(str(tmp_path / "trees.fs"))
    db = DB(storage)
    try:
        with db.transaction() as conn:
            root = conn.root()
            root["o"], root["l"] = OOBTree(), LOBTree()
            for i in range(5000):
                root["o"][str(i)] = i
                root["l"][i] = str(i)
        oids = {rec.oid for txn in storage.iterator() for rec in txn}
        assert len(oids) > 100
        assert [oid for oid in oids if damage_of(storage.load, oid) is not None] == []
    finally:
        db.close()


DAMAGED_EDGE_CHILD = """
import sys, ackqueue
try:  # the open reads the tree in shared mode, the first get in one process
    with ackqueue.AckQueue(sys.argv[1], shared=sys.argv[2] == "shared") as q, q.connect() as c:
        while True:
            c.ack(c.get(timeout=1))
except ackqueue.DamagedFileError as exc:
    print("DamagedFileError", exc)
except ackqueue.Empty:
    print("empty")
"""


@pytest.mark.parametrize("mode", ["one process", "shared"])
def test_a_damaged_node_on_a_tree_edge_is_a_clear_error_not_an_abort(tmp_path, mode):
    # BTrees' C range search does not check that the internal nodes on its way to the last
    # bucket loaded: a damaged one (or one whose ZEO server went away: seen on a 16-core
    # machine, kill_shared.py with 8 workers) aborted the process (SIGABRT, "Assertion
    # `highbucket != NULL' failed") instead of raising.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(1000))  # three levels of EntryTree nodes
    storage = FileStorage(path, read_only=True)
    try:
        db = DB(storage)
        tree = db.open().root()["ackqueue"]["default"].entries
        edge = tree.__getstate__()[0][-1]  # the root's last child: an internal node
        assert type(edge) is type(tree)
        at = storage._lookup_pos(edge._p_oid) + DATA_HDR_LEN
        db.close()
    finally:
        storage.close()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 16)  # its class pickle: unreadable
    child = subprocess.run(
        child_argv(DAMAGED_EDGE_CHILD, path, "shared" if mode == "shared" else "local"),
        env=child_env(), capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.startswith("DamagedFileError "), child.stdout + child.stderr[-2000:]
    assert f"ackqueue salvage {path} --into" in child.stdout


def test_a_damaged_reference_to_an_entry_is_a_clear_error_not_another_item(tmp_path):
    # A changed byte in the oid a tree bucket keeps for an entry points it at another record:
    # an acked item's old entry still loads from the unpacked file, so without a check the
    # get handed out an item acked long ago and the one stored there was never seen again
    # (the corruption campaign met it: "missing 'k30', extra 'i36'").
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many(["a", "b", "c"])
    entries_as_records(path)  # as a file of format 2 keeps its entries (or a shared queue)
    with ackqueue.AckQueue(path, autopack=False) as q:
        oids = q._book.read(lambda record: [e._p_oid for _, e in record.entry_items()])
        with q.connect() as c:
            c.ack(c.get())  # "a": its record stays in the file, unreferenced
    with open(path, "rb") as f:
        data = f.read()
    at = data.rindex(b"C\x08" + oids[1]) + 2  # the last bucket written: it refers to "b"
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(oids[0])  # now to "a"'s old record
    with ackqueue.AckQueue(path) as q, q.connect() as c, pytest.raises(
        ackqueue.DamagedFileError
    ) as raised:
        c.get_nowait()
    assert f"ackqueue salvage {path} --into" in str(raised.value)
    assert "reference is damaged" in str(raised.value)
    # salvage as the error says: "b" is out of reach, and "a" is not put back as if stored
    into = str(tmp_path / "new.fs")
    assert cli(["salvage", path, "--into", into]) == 0
    with ackqueue.AckQueue(into) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == ["c"]


def test_a_closed_files_last_transaction_stamped_early_is_a_clear_error(tmp_path, capsys):
    # With the index a clean close saved, FileStorage takes the file's last transaction id
    # from that transaction's header: a changed byte there makes the records of that
    # transaction look newer than the file, and ZODB's load of the root said only "object
    # deleted, likely by simultaneous pack" (a ReadConflictError) to the queue and the CLI.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(10))
    storage = FileStorage(path, read_only=True)
    try:
        last = list(storage.iterator())[-1]
        tid, at = last.tid, last._tpos
    finally:
        storage.close()
    byte = next(i for i in range(4, 8) if tid[i])  # one that can be made smaller
    with open(path, "r+b") as f:
        f.seek(at + byte)
        f.write(bytes([tid[byte] - 1]))
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(path)
    assert f"ackqueue salvage {path} --into" in str(raised.value)
    assert cli(["stats", path]) != 0
    assert f"ackqueue salvage {path} --into" in capsys.readouterr().err


def test_a_damaged_queue_name_is_a_clear_error_not_a_new_empty_queue(tmp_path):
    # The file maps queue names to records: a changed byte in "default" there made the queue
    # look absent, and opening it made a new, empty one beside the old (the corruption
    # campaign: every item missing, no error).
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5))
    with open(path, "rb") as f:
        data = f.read()
    listing = data.index(b"OOBTree\nOOBTree\n")  # the record of the list of queues
    at = data.index(b"default", listing) + 4  # the "u" of its name there
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"v")
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(path)
    assert "'default' is listed as 'defavlt'" in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)


def test_a_damaged_serializer_name_is_a_damaged_file_not_a_mismatch(tmp_path):
    # "pickle" with a byte changed ("pichle") is no serializer anyone named: the error said
    # to open the queue with serializer='pichle' (the corruption campaign, seed 3).
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5))
    with open(path, "rb") as f:
        data = f.read()
    at = data.rindex(b"X\x06\x00\x00\x00pickle") + 5 + 3  # the "k" of the record's current one
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"h")
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(path)
    assert "'pichle', which is 'pickle' damaged" in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)


def test_a_root_record_without_its_data_is_a_damaged_file(tmp_path, capsys):
    # A changed byte in the name of the root mapping's one attribute ("data") still unpickles:
    # the root then failed on first use with persistent's KeyError('_container').
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5))
    with open(path, "rb") as f:
        data = f.read()
    at = data.rindex(b"X\x04\x00\x00\x00dataq") + 5 + 1  # the root's current record
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"(")
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(path)
    assert "record 0x00" in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)
    assert cli(["stats", path]) != 0
    assert "record 0x00" in capsys.readouterr().err


def stamp_after_the_last_transaction(path: str, oid: bytes) -> None:
    """Change the transaction id in the header of record ``oid``'s current revision to a
    minute after the file's last transaction, as a changed byte there could."""
    storage = FileStorage(path, read_only=True)
    try:
        at = storage._lookup_pos(oid) + 8  # the tid, after the oid in the record's header
        later = p64(u64(storage.lastTransaction()) + (1 << 32))
    finally:
        storage.close()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(later)


def test_a_root_stamped_after_the_last_transaction_is_a_damaged_file_for_the_reader(
    tmp_path, capsys
):
    # A changed byte in the transaction id of the root's own record makes it look newer than
    # the file: a read-only view then takes the root's previous revision, the empty root of a
    # new file, and `ackqueue stats` said the file "holds no ackqueue queues".
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:  # the root written once, with "ackqueue"
        q.put_many(range(5))
    stamp_after_the_last_transaction(path, b"\0" * 8)  # the root record
    assert cli(["stats", path]) != 0
    err = capsys.readouterr().err
    assert "root record 0x00 is stamped with a transaction later" in err
    assert f"ackqueue salvage {path} --into" in err
    # A writer's view finds no revision of the root it may read: the damage, said the same way.
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(path)
    assert "record 0x00 is stamped with a transaction later" in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)


@pytest.mark.parametrize("serializer", ["json", "pickle"])
@pytest.mark.parametrize(
    ("at", "byte", "shown"), [(6, b"4", "BTrees4OOBTree"), (2, b"\n", "BT.ees")]
)
def test_a_class_name_whose_dot_was_changed_is_a_damaged_file_not_a_foreign_record(
    tmp_path, at, byte, shown, serializer
):
    # "BTrees.OOBTree" with its dot changed ("BTrees4OOBTree"), or a letter changed into the
    # newline that ends a module's name in a pickle (module "BT", class "ees.OOBTree"), names
    # no package ackqueue's records name, so the restricted loader took it for a record
    # another program wrote (corrupt_bytes.py --seeds 6 and 11). A pickle queue's record is
    # read through the restricted loader too, until the queue says which serializer it uses.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, serializer=serializer) as q:
        q.put("x", key="k")  # the queue's record now refers to its key index, an OOBTree
    with open(path, "rb") as f:
        data = f.read()
    record = data.rindex(b"ackqueue.records\nQueueRecord")  # its current revision
    name = data.index(b"BTrees.OOBTree", record)
    with open(path, "r+b") as f:
        f.seek(name + at)
        f.write(byte)
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(
        path, serializer=serializer
    ) as q:
        q.put("y", key="k")
    assert shown in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)


def test_a_bucket_value_that_is_no_entry_is_a_damaged_file(tmp_path, capsys):
    # A changed opcode in a bucket can leave a reference's (oid, class) tuple where its entry
    # belongs (the campaign: a BINPUT read as LONG_BINPUT swallowed the BINPERSID, at the cost
    # of a memo of gigabytes, too heavy for a test); a get and `ackqueue stats` then failed on
    # the tuple with an AttributeError. Here the tuple is stored through ZODB itself.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5))
    entries_as_records(path)  # as a file of format 2 keeps its entries (or a shared queue)
    db = DB(FileStorage(path))
    try:
        with db.transaction() as conn:
            tree = conn.root()["ackqueue"]["default"].entries
            key = list(tree.keys())[2]
            tree[key] = (tree[key]._p_oid, "ackqueue.records.Entry")
    finally:
        db.close()
    assert cli(["stats", path]) != 0
    assert "where an entry belongs" in capsys.readouterr().err
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        while True:
            q.get_nowait()
    assert f"ackqueue salvage {path} --into" in str(raised.value)


def test_an_opcode_of_a_later_pickle_protocol_in_a_record_is_a_damaged_file(tmp_path):
    # A BINPERSID changed into MEMOIZE (protocol 4) reads as a whole pickle to the standard
    # library, which the check of a record's bytes uses, but ZODB's unpickler (zodbpickle's,
    # protocol 3) refuses it with OverflowError: that was let out as ZODB's StateLoadError.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(range(5))
    entries_as_records(path)  # as a file of format 2 keeps its entries (or a shared queue)
    state = state_of_current_record(path, b"EntryTree", own=True)  # its one bucket, inline
    with open(path, "rb") as f:
        f.seek(state)
        data = f.read(400)
    persid = data.index(b"Q", data.index(b"\x86"))  # the first reference's BINPERSID
    with open(path, "r+b") as f:
        f.seek(state + persid)
        f.write(b"\x94")
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        q.get_nowait()
    assert "EntryTree" in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)


@pytest.mark.parametrize(("module", "name", "garbled"), [
    ("BTrees4OOBTree", "OOBTree", True),  # its dot changed
    ("BT", "ees.LOBTree", True),  # a letter changed into the newline that ends a module name
    ("kqueue.records", "QueueRecord", True),  # read out of step: its first bytes passed over
    ("os", "system", False),  # what a crafted record names: another program's, not damage
    ("queue", "Queue", False),
    ("mymodule.records", "QueueRecord", False),
])
def test_which_class_names_the_loader_takes_for_damage(module, name, garbled):
    from ackqueue.records import garbled_class_name

    assert garbled_class_name(module, name) is garbled


@pytest.mark.parametrize("stored", ["inline", "record"])
def test_a_due_time_changed_in_the_delay_index_is_a_damaged_file(tmp_path, stored):
    """A delayed item's due time is kept twice, in its entry and in the queue's delay index
    (the index is what an open reads): a changed byte in the index's copy handed the item out
    early (the corruption campaign's seed 14) or would hold it back for years."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put("now")
        q.put("next year", delay=365 * 86400)
    if stored == "record":
        entries_as_records(path)

    def damage(queues):
        delayed = queues["default"].delayed
        key = delayed.minKey()
        delayed[key] = delayed[key] - 365 * 86400  # due a year early: now

    craft(path, damage)
    with pytest.raises(ackqueue.DamagedFileError) as raised:
        ackqueue.AckQueue(path)
    assert "the delay index of queue 'default' says entry" in str(raised.value)
    assert f"ackqueue salvage {path} --into" in str(raised.value)


def store_state(path: str, oid: bytes, state: bytes) -> None:
    """Store a new revision of record ``oid`` with its class as it is and ``state`` (a pickle)
    as its state, at FileStorage's API: what a damaged byte could have left."""
    storage = FileStorage(path)
    try:
        data, serial = storage.load(oid)
        meta = TransactionMetaData()
        storage.tpc_begin(meta)
        storage.store(oid, serial, data[:class_pickle_end(data)] + state, "", meta)
        storage.tpc_vote(meta)
        storage.tpc_finish(meta)
    finally:
        storage.close()


def test_a_record_whose_state_its_class_refuses_is_a_damaged_file_saying_why(tmp_path):
    # The queue's record with a list for a state: persistent's own __setstate__ refuses it,
    # and no code of ackqueue's ran, so the file is damaged (not a bug to let out).
    path = queue_file(tmp_path)
    store_state(path, stored_oid(path, b"QueueRecord", own=True), pickle.dumps([1, 2], 3))
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        q.qsize()
    message = str(raised.value)
    assert "(ackqueue.records.QueueRecord) has a state its class refuses (AttributeError: " \
        "'list' object has no attribute 'items')" in message
    assert f"ackqueue salvage {path} --into" in message


def test_a_record_without_an_attribute_its_class_always_has_names_the_attribute(tmp_path):
    path = queue_file(tmp_path)
    craft(path, lambda queues: delattr(queues["default"], "seq_reserved"))
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        q.qsize()
    assert "(ackqueue.records.QueueRecord) its state has no seq_reserved" in str(raised.value)


def test_a_record_packed_away_under_an_open_view_is_a_conflict_not_damage(tmp_path):
    # A view opened before an object changed, whose older revision a pack then dropped, cannot
    # load it: ZODB's ReadConflictError, which the caller retries. The record is whole, and
    # stamped with the file's last transaction: not damage.
    path = str(tmp_path / "plain.fs")
    db = new_db(FileStorage(path))
    try:
        with db.transaction() as conn:
            conn.root()["x"] = PersistentMapping({"n": 1})
        viewer = transaction.TransactionManager()
        view = db.open(transaction_manager=viewer)
        view.cacheMinimize()  # (the pool's connection: x was loaded)
        old = view.root()["x"]  # a ghost of the revision the view sees
        with db.transaction() as conn:
            conn.root()["x"]["n"] = 2
        time.sleep(0.01)
        db.pack()
        with pytest.raises(ReadConflictError) as raised:
            old._p_activate()
        assert not isinstance(raised.value, ackqueue.DamagedFileError)
        viewer.abort()
        view.close()
    finally:
        db.close()


def test_a_record_stamped_after_the_files_last_transaction_is_a_damaged_file(tmp_path):
    # A changed byte in the transaction id of a record's header makes it newer than the file:
    # its view then finds no revision to read (ZODB's ReadConflictError, "deleted, likely by
    # simultaneous pack"), which would be retried for ever.
    path = str(tmp_path / "plain.fs")
    db = new_db(FileStorage(path))
    try:
        with db.transaction() as conn:
            conn.root()["x"] = PersistentMapping({"n": 1})
        with db.transaction() as conn:
            conn.root()["y"] = 1  # the last transaction, after x's only revision
            oid = conn.root()["x"]._p_oid
    finally:
        db.close()
    stamp_after_the_last_transaction(path, oid)
    db = new_db(FileStorage(path, read_only=True))
    try:
        conn = db.open()
        with pytest.raises(ackqueue.DamagedFileError) as raised:
            conn.root()["x"]._p_activate()
        assert f"record {oid_repr(oid)} (persistent.mapping.PersistentMapping) is stamped " \
            "with a transaction later than the file's last one" in str(raised.value)
        conn.close()
    finally:
        db.close()


def test_zodbs_traceback_of_a_refused_record_is_left_out_and_every_other_log_kept(caplog):
    # ZODB logs a record that fails to load with its traceback; for a record the restricted
    # loader refused, the UnsafeRecordError raised says it all, once.
    with ackqueue.AckQueue(None):
        pass  # a database ackqueue opened: its filter is on ZODB's Connection logger
    log = logging.getLogger("ZODB.Connection")

    def raised(exc: BaseException) -> BaseException:
        try:
            raise exc
        except BaseException as caught:
            return caught

    refused = StateLoadError()
    refused.__cause__ = ackqueue.UnsafeRecordError("names os.system")
    with caplog.at_level(logging.INFO, logger="ZODB.Connection"):
        log.info("a plain notice")
        log.error("a load failed", exc_info=raised(StateLoadError("other")))
        log.error("a record refused", exc_info=raised(refused))
    assert [r.getMessage() for r in caplog.records] == ["a plain notice", "a load failed"]


def test_a_garbled_class_name_loaded_for_a_pickle_queue_is_a_damaged_file(tmp_path):
    # Once a pickle queue is open, the file loads through ZODB's own loader, which makes a
    # reference to a class no module has into its Broken stand-in: here a bucket's reference
    # to an entry record, read by a get after the open. The reader that finds the stand-in
    # where an entry belongs says so.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, autopack=False) as q:
        q.put_many(range(100))
    entries_as_records(path)
    with open(path, "rb") as f:
        data = f.read()
    # The last bucket written refers to its entries by (oid, class): the class's name once.
    bucket = data.rindex(b"BTrees.LOBTree\nLOBucket")
    name = data.index(b"ackqueue.records\nEntry", bucket)
    with open(path, "r+b") as f:
        f.seek(name + 8)
        f.write(b"4")
    with pytest.raises(ackqueue.DamagedFileError) as raised, ackqueue.AckQueue(path) as q:
        for _ in range(100):
            q.get_nowait()
    message = str(raised.value)
    assert "its entry tree holds Entry under key " in message
    assert f"ackqueue salvage {path} --into" in message
