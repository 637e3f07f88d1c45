"""The stored format of a queue made in shared mode (format 4): its entries in shards, one tree
per block of sequence numbers (ackqueue/records.py's ShardedEntries), so that processes putting
at once insert into trees of their own (in one tree, a bucket split by one process failed the
puts of every other: BTrees mark each internal node an insert passes read-current).

What must hold, at the record: the shards together are one mapping in delivery order (a model
test); an insert into a shard and the deletion of that shard (emptied, its block long past)
conflict whichever commits first, so no put is ever lost into a shard that is no longer listed;
damage to a shard's keys is found. tests/shared/test_shard_sessions.py has the sessions' side.
"""

from __future__ import annotations

import pytest
import transaction
import ZODB
from hypothesis import given, settings
from hypothesis import strategies as st
from ZODB.POSException import ConflictError

from ackqueue.records import (
    RETIRE_LAG,
    SEQ_BITS,
    SEQ_MASK,
    SHARD_BITS,
    SHARD_SEQS,
    EntryShard,
    QueueRecord,
    ShardedEntries,
    inline_entry,
    queues_of,
)


def fifo_key(seq: int, priority: int = 0) -> int:
    return (priority << SEQ_BITS) | seq


def lifo_key(seq: int, priority: int = 0) -> int:
    return (priority << SEQ_BITS) | (SEQ_MASK - seq)


@pytest.fixture
def db(tmp_path):
    database = ZODB.DB(str(tmp_path / "shards.fs"))
    yield database
    database.close()


def make_record(db, kind: str = "fifo") -> None:
    with db.transaction() as conn:
        queues_of(conn.root(), create=True)["q"] = QueueRecord(kind, sharded=True)


def record_of(conn) -> QueueRecord:
    return queues_of(conn.root(), create=False)["q"]


# -- the shards as one mapping, against a dict --------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 150), st.integers(-1, 1)),
        st.tuples(st.just("drop"), st.integers(0, 150), st.integers(-1, 1)),
        st.tuples(st.just("retire"), st.integers(0, 6000), st.just(0)),
    ),
    min_size=20,
    max_size=80,
)


@settings(max_examples=40, deadline=None)
@given(lifo=st.booleans(), ops=operations, starts=st.lists(st.integers(0, 150), max_size=4))
def test_the_shards_are_one_mapping_in_key_order(tmp_path_factory, lifo, ops, starts) -> None:
    """Puts, drops and deletions of emptied shards in any order, a transaction each: the
    shards hold exactly the model's entries; every walk (from the start, from just after each
    stored key and after keys not stored) gives them in key order; and no emptied shard whose
    block is past is left near the head after a sweep's deletion."""
    db = ZODB.DB(str(tmp_path_factory.mktemp("model") / "m.fs"))
    try:
        make = lifo_key if lifo else fifo_key
        model: dict[int, bytes] = {}
        with db.transaction() as conn:
            queues_of(conn.root(), create=True)["q"] = QueueRecord(
                "lifo" if lifo else "fifo", sharded=True
            )
        for n, (op, seq, priority) in enumerate(ops):
            with db.transaction() as conn:
                record = record_of(conn)
                if op == "put":
                    key = make(seq, priority)
                    record.new_entry(key, b"%d" % n, 1.0)
                    model[key] = b"%d" % n
                elif op == "drop":
                    key = make(seq, priority)
                    if key in model:
                        record.drop_entry(key)
                        del model[key]
                    else:
                        with pytest.raises(KeyError):
                            record.drop_entry(key)
                else:
                    record.seq_reserved = seq
                    record.retire_empty_shards()
                    behind = (seq - RETIRE_LAG) >> SHARD_BITS
                    assert not [
                        number for number, shard in record.entries.shards.items()
                        if shard.block < behind and not shard.tree
                    ]
        with db.transaction() as conn:
            record = record_of(conn)
            entries = record.entries
            assert isinstance(entries, ShardedEntries)
            ordered = sorted(model)
            assert list(record.entry_keys()) == ordered
            assert [(k, e.data) for k, e in record.entry_items()] == [
                (k, model[k]) for k in ordered
            ]
            assert [inline_entry(v).data for v in entries.values()] == [model[k] for k in ordered]
            assert record.entry_count() == len(model) == len(entries)
            assert bool(entries) == bool(model)
            # Keys not stored: some in listed shards, one in a shard never made.
            unstored = [make(s, p) for s in starts for p in (-1, 0, 1)] + [make(10_000)]
            for start in ordered + unstored:
                after = [k for k in ordered if k > start]
                assert list(record.entry_keys(after=start)) == after
                assert [k for k, _ in record.entry_items(after=start)] == after
                assert record.has_entry(start) == (start in model)
                found = record.entry(start)
                assert (found.data if found is not None else None) == model.get(start)
            if model:
                assert entries.minKey() == ordered[0]
            else:
                with pytest.raises(ValueError):
                    entries.minKey()
            assert record.entry_damage() is None
            unreadable: list[str] = []
            assert sorted(e.data for e in record.salvageable_entries(unreadable)) == sorted(
                model.values()
            )
            assert unreadable == []
            # Every listed shard holds only keys of its own range and block.
            for number, shard in entries.shards.items():
                assert all(key >> SHARD_BITS == number for key in shard.tree)
                seqs = {(SEQ_MASK - (k & SEQ_MASK)) if lifo else k & SEQ_MASK for k in shard.tree}
                assert all(seq >> SHARD_BITS == shard.block for seq in seqs)
    finally:
        db.close()


# -- an insert and the deletion of its shard race ------------------------------------------


def emptied_old_shard(db) -> int:
    """A record with shard 0 listed, empty and far behind the reserved numbers: the key of
    the entry it held."""
    make_record(db)
    with db.transaction() as conn:
        record = record_of(conn)
        record.new_entry(fifo_key(5), b"x", 1.0)
        record.drop_entry(fifo_key(5))  # still young: kept
        assert len(record.entries.shards) == 1
        record.seq_reserved = RETIRE_LAG + 4 * SHARD_SEQS  # now old
    return fifo_key(5)


def test_a_put_into_a_shard_deleted_meanwhile_conflicts_and_its_retry_lists_a_new_one(
    db,
) -> None:
    emptied_old_shard(db)
    putter, remover = transaction.TransactionManager(), transaction.TransactionManager()
    put_conn, remove_conn = db.open(putter), db.open(remover)
    record_of(put_conn).new_entry(fifo_key(6), b"put", 1.0)  # into the listed shard
    assert record_of(remove_conn).retire_empty_shards() == 1
    remover.commit()
    with pytest.raises(ConflictError):
        putter.commit()  # else its entry would be in a shard no longer listed: lost
    putter.abort()
    record_of(put_conn).new_entry(fifo_key(6), b"put", 1.0)  # the retry
    putter.commit()
    with db.transaction() as conn:
        assert [e.data for _, e in record_of(conn).entry_items()] == [b"put"]
        shard = record_of(conn).entries.shard_of(fifo_key(6))
        assert isinstance(shard, EntryShard) and not shard.retired
    put_conn.close()
    remove_conn.close()


def test_a_deletion_of_a_shard_that_a_put_filled_meanwhile_conflicts(db) -> None:
    emptied_old_shard(db)
    putter, remover = transaction.TransactionManager(), transaction.TransactionManager()
    put_conn, remove_conn = db.open(putter), db.open(remover)
    remover.begin()
    remove_conn.root()  # its view of the database is fixed from here: the shard empty
    record_of(put_conn).new_entry(fifo_key(6), b"put", 1.0)
    putter.commit()
    assert record_of(remove_conn).retire_empty_shards() == 1  # empty, as it sees it
    with pytest.raises(ConflictError):
        remover.commit()
    remover.abort()
    assert record_of(remove_conn).retire_empty_shards() == 0  # it now sees the entry
    remover.commit()
    with db.transaction() as conn:
        assert [e.data for _, e in record_of(conn).entry_items()] == [b"put"]
    put_conn.close()
    remove_conn.close()


@pytest.mark.parametrize("kind", ["fifo", "lifo"])
def test_an_emptied_shard_is_kept_while_its_block_may_still_be_put_into(db, kind) -> None:
    """Deleted once its block is RETIRE_LAG numbers behind the reserved ones, by a sweep or
    by the drop that empties it; kept before (its owner may still be putting into it)."""
    make = lifo_key if kind == "lifo" else fifo_key
    make_record(db, kind)
    with db.transaction() as conn:
        record = record_of(conn)
        record.seq_reserved = 2 * SHARD_SEQS  # blocks 0 and 1 are the newest
        for seq in (1, SHARD_SEQS + 1, 9 * SHARD_SEQS + 1):  # blocks 0, 1 and 9
            record.new_entry(make(seq), b"x", 1.0)
            record.drop_entry(make(seq))
        assert record.retire_empty_shards() == 0
        assert len(record.entries.shards) == 3
        record.seq_reserved = RETIRE_LAG + 9 * SHARD_SEQS  # blocks 0 and 1 are past, not 9
        assert record.retire_empty_shards() == 2
        assert [shard.block for shard in record.entries.shards.values()] == [9]
        record.new_entry(make(9 * SHARD_SEQS + 2), b"y", 1.0)
        record.seq_reserved = RETIRE_LAG + 10 * SHARD_SEQS  # 9 is past now: the drop deletes
        record.drop_entry(make(9 * SHARD_SEQS + 2))
        assert len(record.entries.shards) == 0
        record.new_entry(make(3), b"z", 1.0)  # a past block again: a new shard, kept while full
        assert [e.data for _, e in record.entry_items()] == [b"z"]


# -- damage ---------------------------------------------------------------------------------


def two_shards(conn) -> QueueRecord:
    """The record, its entries in two shards, two in the first (changes left uncommitted)."""
    record = record_of(conn)
    for seq in (1, 2, SHARD_SEQS + 1):
        record.new_entry(fifo_key(seq), b"x", 1.0)
    return record


def test_a_key_in_another_shard_than_its_own_is_damage(db) -> None:
    make_record(db)
    with db.transaction() as conn:
        record = two_shards(conn)
        assert record.entry_damage() is None
        # A changed byte in a key: it unpickles, under another shard's range.
        record.entries.shards[0].tree[fifo_key(SHARD_SEQS + 7)] = b"damaged"
        assert "not its own" in str(record.entry_damage())
        conn.transaction_manager.abort()  # the damage is not committed


def swapped_first_keys(node) -> None:
    """Swap the first two keys of a small BTree (its one bucket is in its own state), as a
    changed byte in each could: both still unpickle, out of order."""
    (((items,),),) = node.__getstate__()  # (((k, v, k, v...),),)
    items = list(items)
    items[0], items[2] = items[2], items[0]
    node.__setstate__((((tuple(items),),),))


def test_keys_out_of_order_in_a_shard_or_in_the_index_are_damage(db) -> None:
    make_record(db)
    with db.transaction() as conn:
        record = two_shards(conn)
        swapped_first_keys(record.entries.shards[0].tree)
        assert "has a shard that is out of order" in str(record.entry_damage())
        conn.transaction_manager.abort()  # the damage is not committed
    with db.transaction() as conn:
        record = two_shards(conn)
        swapped_first_keys(record.entries.shards)
        assert "has a shard index that is out of order" in str(record.entry_damage())
        conn.transaction_manager.abort()  # the damage is not committed


def test_a_priority_queue_made_in_shared_mode_keeps_one_tree(db) -> None:
    """Its keys are its items: no process has a range of its own to shard by."""
    with db.transaction() as conn:
        record = QueueRecord("priority", sharded=True)
        assert record.format_version == 3
        assert not isinstance(record.entries, ShardedEntries)
        conn.root()["x"] = record
