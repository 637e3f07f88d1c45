"""How puts by key are kept in the file: the key's stored form, when a remembered key runs out,
the seen-set's expiry sweep (one tree, and the shards of a queue made in shared mode), and the
delay index after a put by key moves an item's due time. Written for the survivors of a mutation
run of ackqueue/storage/keys.py (benchmarks/mutation_survivors_storage.rst)."""

from __future__ import annotations

import os

import pytest
import ZODB

import ackqueue
from ackqueue import KeyTypeError, ManualClock
from ackqueue.records import ShardedIndex, index_shard, queues_of
from ackqueue.storage.keys import (
    index_key,
    remember_seconds,
    seen_count,
    seen_until,
    shown_key,
    sweep_expired,
)


@pytest.fixture
def path(tmp_path) -> str:
    return os.path.join(tmp_path, "q.fs")


def keyed_index(q: ackqueue.AckQueue) -> dict[bytes, object]:
    return q._book.read(lambda record: dict(record.keyed.items()))


# -- the stored form of a key ---------------------------------------------------------------


def test_a_key_is_stored_with_its_type_and_every_code_point(path) -> None:
    """A str key and a bytes key of the same letters are two keys; a str key is stored as
    UTF-8 with lone surrogates kept (a file name from os.fsdecode may hold them); the stored
    form is the file format: files written before read it back so."""
    assert index_key("a/é") == b"sa/\xc3\xa9"
    assert index_key(b"a/\xff") == b"ba/\xff"
    assert index_key("x\udc80") == b"sx\xed\xb2\x80"
    for key in ["a/é", b"a/\xff", "x\udc80", "", b""]:
        assert shown_key(index_key(key)) == key and type(shown_key(index_key(key))) is type(key)
    with ackqueue.AckQueue(path) as q:
        assert q.put("str", key="a") is True
        assert q.put("bytes", key=b"a") is True
        assert q.put("surrogate", key="x\udc80") is True
        assert q.put("again", key="x\udc80") is False
        assert set(keyed_index(q)) == {b"sa", b"ba", b"sx\xed\xb2\x80"}


def test_a_key_of_another_type_is_an_error_that_names_its_type(path) -> None:
    with ackqueue.AckQueue(path) as q:
        with pytest.raises(KeyTypeError, match=r"not int: convert it first"):
            q.put("x", key=12)  # type: ignore[arg-type]
        assert q.qsize() == 0


def test_a_key_may_be_remembered_for_a_fraction_of_a_second(path) -> None:
    assert remember_seconds(0.5) == 0.5
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        assert q.put("a", key="a", unique=0.5) is True
        assert q.get_nowait() == "a"
        assert q.put("a", key="a") is False
        clock.advance(0.6)
        assert q.put("a", key="a") is True


# -- when a remembered key runs out ---------------------------------------------------------


@pytest.fixture
def record_db(tmp_path):
    db = ZODB.DB(str(tmp_path / "keys.fs"))
    yield db
    db.close()


def a_record(db, sharded: bool):
    from ackqueue.records import QueueRecord

    with db.transaction() as conn:
        queues_of(conn.root(), create=True)["q"] = QueueRecord("fifo", sharded=sharded)


def test_a_key_remembered_until_now_is_no_longer_seen(record_db) -> None:
    """``until`` is when the key stops being remembered: at that instant it is free."""
    a_record(record_db, sharded=False)
    with record_db.transaction() as conn:
        record = queues_of(conn.root(), create=False)["q"]
        record.seen_set()[b"sk"] = 100.0
        assert seen_until(record, b"sk", 99.5) == 100.0
        assert seen_until(record, b"sk", 100.0) is None
        assert seen_count(record, 99.5) == 1
        assert seen_count(record, 100.0) == 0


@pytest.mark.parametrize("sharded", [False, True], ids=["one tree", "shards"])
def test_the_expiry_sweep_goes_on_where_it_stopped_and_deletes_every_expired_key(
    record_db, sharded
) -> None:
    """Each keyed put sweeps a few seen keys, from where the last sweep stopped: a sweep of
    ``limit`` keys says where it stopped (the last key it looked at, None at the end), the
    next goes on just after it, and keys remembered until now or earlier go."""
    a_record(record_db, sharded)
    keys = [b"s%03d" % n for n in range(30)]
    with record_db.transaction() as conn:
        record = queues_of(conn.root(), create=False)["q"]
        seen = record.seen_set()
        assert isinstance(seen, ShardedIndex) is sharded
        for n, key in enumerate(keys):
            seen[key] = 100.0 if n % 3 else 50.0  # every third one expires by 50
        seen[keys[4]] = 60.0  # until exactly the sweep's now: expired
        order = list(seen.keys())
    assert sorted(order, key=(lambda k: (index_shard(k), k)) if sharded else None) == order
    stops = []
    with record_db.transaction() as conn:
        record = queues_of(conn.root(), create=False)["q"]
        after = None
        for _ in range(len(keys)):  # bounded: a sweep that never ends fails here
            after = sweep_expired(record, after, 60.0, 4)
            stops.append(after)
            if after is None:
                break
    assert stops == [order[n] for n in range(3, len(keys), 4)] + [None]
    expired = {key for n, key in enumerate(keys) if n % 3 == 0} | {keys[4]}
    with record_db.transaction() as conn:
        record = queues_of(conn.root(), create=False)["q"]
        assert set(record.seen.keys()) == set(keys) - expired


def test_expired_keys_are_swept_by_later_puts_past_keys_that_are_remembered(path) -> None:
    """Keys remembered for ever that sort first do not stop the sweep: later puts by key go
    on past them and delete the expired keys after them (else they pile up on disk)."""
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        q.put_many(list(range(8)), keys=[f"a{n}" for n in range(8)], unique="forever")
        q.put_many(list(range(20)), keys=[f"z{n:02}" for n in range(20)], unique=10)
        assert len([q.get_nowait() for _ in range(28)]) == 28
        assert q._book.read(lambda record: len(record.seen)) == 28
        clock.advance(11)
        for n in range(12):  # each sweeps 4 seen keys
            q.put(n, key=f"m{n}")
        assert q._book.read(lambda record: sorted(record.seen.keys())) == [
            index_key(f"a{n}") for n in range(8)
        ]


# -- the delay index after a put by key moves a due time --------------------------------------


@pytest.mark.parametrize("shared", [False, True], ids=["one process", "shared"])
def test_a_put_by_key_that_makes_a_waiting_item_due_takes_it_out_of_the_delay_index(
    path, shared
) -> None:
    """A put by key with no delay makes the waiting item of its key due at once: its entry and
    the delay index both say so, and a reopen (which checks one against the other) finds it
    ready, not delayed and not damaged."""
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock, shared=shared or None) as q:
        assert q.put("waiting", key="k", delay=100) is True
        assert q.put("now", key="k") is False
        assert q._book.read(lambda record: len(record.delayed)) == 0
    with ackqueue.AckQueue(path, clock=clock, shared=shared or None) as q:
        assert q.delayed_count() == 0
        assert q.get(timeout=5) == "waiting"


@pytest.mark.parametrize("how", ["by key", "where"])
def test_a_removal_rolled_back_leaves_a_delayed_item_waiting(path, how) -> None:
    """A removal in a transaction block that fails gives the item back as it was: one put
    with a delay waits for its time again instead of coming at once."""
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        q.put("later", key="k", delay=100)
        q.put("now", key="n")
        with pytest.raises(RuntimeError), q.transaction():
            if how == "by key":
                q.remove("k")
            else:
                assert q.remove_where(lambda item: item == "later") == 1
            raise RuntimeError("the block fails")
        assert q.delayed_count() == 1
        assert q.get_nowait() == "now"
        with pytest.raises(ackqueue.Empty):
            q.get_nowait()
        clock.advance(101)
        assert q.get_nowait() == "later"
