"""The indexes of a queue made in shared mode (format 5): its key index, seen-set and delay index
in shards (ackqueue/records.py's ShardedIndex), so that processes putting by key, or with a
delay, at once insert into trees of their own. In one tree, a bucket split by one process failed
the puts of every other that had passed the same internal nodes (BTrees mark each internal node
an insert passes read-current): 0.13 conflicts an item with 4 processes putting by key.

What must hold, at the record: the shards together are one mapping, walked in one order from
anywhere (a model test); inserts into two shards from two connections at once both commit where
one tree failed the second; which records get shards, and which format they then say they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import transaction
import ZODB
from BTrees.LOBTree import LOBTree
from BTrees.OOBTree import OOBTree
from hypothesis import given, settings
from hypothesis import strategies as st
from ZODB.POSException import ConflictError

from ackqueue.records import (
    INDEX_SHARDS,
    SEQ_BITS,
    QueueRecord,
    ShardedIndex,
    index_shard,
    queues_of,
)


@pytest.fixture
def db(tmp_path):
    database = ZODB.DB(str(tmp_path / "indexes.fs"))
    yield database
    database.close()


def record_of(conn) -> QueueRecord:
    return queues_of(conn.root(), create=False)["q"]


def make_record(db, kind: str = "fifo", sharded: bool = True) -> None:
    with db.transaction() as conn:
        queues_of(conn.root(), create=True)["q"] = QueueRecord(kind, sharded=sharded)


def walk_order(key) -> tuple[int, object]:
    return index_shard(key), key


# -- the shards as one mapping, against a dict --------------------------------------------

byte_keys = st.binary(min_size=1, max_size=6)
entry_keys = st.builds(lambda seq, priority: (priority << SEQ_BITS) | seq,
                       st.integers(0, 5000), st.integers(0, 2))


def mapping_ops(keys: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(
        st.tuples(st.sampled_from(["set", "del", "pop"]), keys, st.floats(0, 1e9)),
        min_size=10, max_size=120,
    )


@settings(max_examples=30, deadline=None)
@given(data=st.data(), ints=st.booleans())
def test_the_shards_are_one_mapping_walked_in_one_order(tmp_path_factory, data, ints) -> None:
    """Sets, deletions and pops of keys (put keys as bytes, or entry keys), committed in a few
    transactions: the index holds exactly the model's keys and values; a walk from the start
    visits each once; a walk from any stored key, or from a key not stored, goes on from its
    place in that order (so a sweep that remembers where it stopped misses nothing); a key of
    another type is absent, not an error."""
    keys = entry_keys if ints else byte_keys
    ops = data.draw(mapping_ops(keys))
    probes = data.draw(st.lists(keys, max_size=5))
    db = ZODB.DB(str(tmp_path_factory.mktemp("model") / "m.fs"))
    try:
        with db.transaction() as conn:
            conn.root()["index"] = ShardedIndex(LOBTree if ints else OOBTree)
        model: dict = {}
        for start in range(0, len(ops), 25):
            with db.transaction() as conn:
                index = conn.root()["index"]
                for op, key, value in ops[start:start + 25]:
                    if op == "set":
                        index[key] = value
                        model[key] = value
                    elif op == "del":
                        if key in model:
                            del index[key]
                            del model[key]
                        else:
                            with pytest.raises(KeyError):
                                del index[key]
                    else:
                        assert index.pop(key, None) == model.pop(key, None)
        with db.transaction() as conn:
            index = conn.root()["index"]
            walk = list(index.keys())
            assert sorted(walk, key=walk_order) == walk
            assert set(walk) == set(model) and len(walk) == len(model) == len(index)
            assert bool(index) == bool(model)
            assert dict(index.items()) == model
            assert sorted(index.values()) == sorted(model.values())
            for key, value in model.items():
                assert key in index and index[key] == value and index.get(key) == value
            for n, key in enumerate(walk):
                assert list(index.keys(min=key)) == walk[n:]
                assert list(index.keys(min=key, excludemin=True)) == walk[n + 1:]
                assert [k for k, _ in index.items(min=key, excludemin=True)] == walk[n + 1:]
            for probe in probes:
                after = [k for k in walk if walk_order(k) > walk_order(probe)]
                assert list(index.keys(min=probe, excludemin=True)) == after
                if probe not in model:
                    assert probe not in index and index.get(probe, "none") == "none"
                    with pytest.raises(KeyError):
                        index[probe]
            other = "a str" if ints else 12
            assert other not in index and index.get(other) is None
            assert index.pop(other, "none") == "none"
            with pytest.raises(KeyError):
                index[other]
    finally:
        db.close()


def test_a_key_goes_to_a_shard_its_crc_or_its_block_names() -> None:
    assert index_shard(b"abc") == index_shard("abc")
    assert {index_shard(bytes([n])) for n in range(256)} == set(range(INDEX_SHARDS))
    block = 1 << 6  # entry keys of one block share a shard; the next block has the next one
    assert {index_shard(5 * block + n) for n in range(block)} == {5}
    assert index_shard(6 * block) == 6
    with pytest.raises(TypeError):
        index_shard(1.5)
    with pytest.raises(TypeError):
        index_shard(True)


# -- two connections putting at once ------------------------------------------------------


@contextmanager
def two_connections(db) -> Iterator[tuple[Any, Any]]:
    """Two connections, each with a transaction manager of its own: two processes at once."""
    conns = [db.open(transaction_manager=transaction.TransactionManager()) for _ in range(2)]
    try:
        yield conns[0], conns[1]
    finally:
        for conn in conns:
            conn.close()


def keys_of_shard(number: int, count: int) -> list[bytes]:
    found: list[bytes] = []
    n = 0
    while len(found) < count:
        key = b"%040x" % n
        if index_shard(key) == number:
            found.append(key)
        n += 1
    return found


@pytest.mark.parametrize("sharded", [True, False], ids=["shards", "one tree"])
def test_inserts_into_two_shards_at_once_both_commit(db, sharded) -> None:
    """Connection A inserts keys enough to split nodes of the index while connection B
    inserts one key; B commits after A. Into shards of their own both commit; into one tree
    (a queue made by one process, kept as it was) B's commit fails, which is why a shared
    queue's index is sharded."""
    make_record(db, sharded=sharded)
    with db.transaction() as conn:
        index = record_of(conn).key_index()
        assert isinstance(index, ShardedIndex if sharded else OOBTree)
        for number in range(INDEX_SHARDS):
            for key in keys_of_shard(number, 40):
                index[key] = number
    a_keys = keys_of_shard(0, 140)[40:]
    b_key = keys_of_shard(1, 41)[40]
    with two_connections(db) as (conn_a, conn_b):
        for key in a_keys:
            record_of(conn_a).key_index()[key] = 0
        record_of(conn_b).key_index()[b_key] = 1
        conn_a.transaction_manager.commit()
        if sharded:
            conn_b.transaction_manager.commit()
        else:
            with pytest.raises(ConflictError):
                conn_b.transaction_manager.commit()
            conn_b.transaction_manager.abort()
    with db.transaction() as conn:
        index = record_of(conn).key_index()
        assert all(key in index for key in a_keys)
        assert (b_key in index) is sharded


def test_delayed_entries_of_two_blocks_at_once_both_commit(db) -> None:
    """The delay index of a shared queue: two processes' delayed puts, each in its own block
    of entry keys, insert into shards of their own."""
    make_record(db)
    block = 1 << 6
    with db.transaction() as conn:
        index = record_of(conn).delay_index()
        for key in range(0, 2000):
            index[key] = 1.0
    with two_connections(db) as (conn_a, conn_b):
        for key in range(40 * block, 40 * block + block):
            record_of(conn_a).delay_index()[key] = 2.0
        record_of(conn_b).delay_index()[41 * block] = 3.0
        conn_a.transaction_manager.commit()
        conn_b.transaction_manager.commit()
    with db.transaction() as conn:
        index = record_of(conn).delay_index()
        assert index[41 * block] == 3.0 and index[40 * block + 5] == 2.0 and len(index) == 2065


# -- which records shard their indexes ------------------------------------------------------


def indexes_of(record: QueueRecord) -> list[type]:
    return [type(record.key_index()), type(record.seen_set()), type(record.delay_index())]


@pytest.mark.parametrize("kind", ["fifo", "lifo"])
def test_a_queue_made_in_shared_mode_is_format_5_with_sharded_indexes(db, kind) -> None:
    make_record(db, kind)
    with db.transaction() as conn:
        record = record_of(conn)
        assert record.format_version == 5
        assert indexes_of(record) == [ShardedIndex] * 3


def test_a_priority_queue_or_one_made_by_one_process_keeps_one_tree_each(db) -> None:
    with db.transaction() as conn:
        queues = queues_of(conn.root(), create=True)
        queues["p"] = QueueRecord("priority", sharded=True)
        queues["q"] = QueueRecord("fifo")
    with db.transaction() as conn:
        queues = queues_of(conn.root(), create=False)
        assert indexes_of(queues["p"]) == [OOBTree, OOBTree, OOBTree]
        assert indexes_of(queues["q"]) == [OOBTree, OOBTree, LOBTree]
        assert [queues["p"].format_version, queues["q"].format_version] == [3, 3]


def test_a_format_4_record_shards_the_indexes_it_makes_and_keeps_those_it_has(db) -> None:
    """A queue made in shared mode by the version before (format 4: entries in shards, indexes
    in trees) keeps an index it already has as it is; one it makes now is sharded, and the
    record says format 5 from then on (the version before refuses it)."""
    make_record(db)
    with db.transaction() as conn:
        record = record_of(conn)
        record.format_version = 4
        record.keyed = OOBTree({b"k": 1})
    with db.transaction() as conn:
        record = record_of(conn)
        assert isinstance(record.key_index(), OOBTree)
        assert record.format_version == 4
        assert isinstance(record.delay_index(), ShardedIndex)
        assert record.format_version == 5
