"""Sessions on a queue made in shared mode, whose entries are in shards (format 4; the format
itself: tests/storage/test_shards.py): each shared session puts into shards no other session
puts into; a plain open reads and works such a queue and deletes its emptied shards; a queue
made by a plain open keeps its one tree in shared mode.
"""

from __future__ import annotations

import os
import pickle
import time

import ZEO
import ZODB
from campaign_children import server_pid
from conftest import alive
from polling import wait_until
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue
from ackqueue.records import RETIRE_LAG, SHARD_SEQS, ShardedEntries, queues_of
from ackqueue.shared.ready import COUNT_SECONDS

# -- through the queue ----------------------------------------------------------------------


def shard_putters(path_or_db: object) -> list[set[str]]:
    """Which putters' items (``"a3"``: putter ``a``) each shard of queue ``default`` holds."""
    db = ZODB.DB(path_or_db) if isinstance(path_or_db, str) else path_or_db
    try:
        with db.transaction() as conn:
            record = queues_of(conn.root(), create=False)["default"]
            assert isinstance(record.entries, ShardedEntries)
            assert record.format_version == 5  # shards for the entries and indexes
            return [
                {str(pickle.loads(entry.data))[0] for entry in shard.tree.values()}
                for shard in record.entries.shards.values()
            ]
    finally:
        if isinstance(path_or_db, str):
            db.close()


def test_each_shared_session_puts_into_shards_of_its_own(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """Two sessions (two clients of one server, as two processes) putting in turns, after
    the reserved numbers were left unaligned (as an older ackqueue's plain open could):
    every shard holds one session's items, and the queue gives each session's in put order."""
    other_db, reader = ZEO.DB(zeo_server.addr), ZEO.DB(zeo_server.addr)
    try:
        with (
            ackqueue.AckQueue(zeo_server.uri, session_timeout=30) as a,
            ackqueue.AckQueue(db=other_db, session_timeout=30) as b,
        ):
            a.put("a-first")
            with reader.transaction() as conn:
                queues_of(conn.root(), create=False)["default"].seq_reserved += 37
            for n in range(150):
                a.put(f"a{n}")
                b.put(f"b{n}")
            putters = shard_putters(reader)
            assert putters and all(len(found) == 1 for found in putters), putters
            with a.connect() as c:
                got = [c.get(timeout=10) for _ in range(301)]
                c.ack_many(got)
    finally:
        other_db.close()
        reader.close()
    assert [x for x in got if x[0] == "a"] == ["a-first"] + [f"a{n}" for n in range(150)]
    assert [x for x in got if x[0] == "b"] == [f"b{n}" for n in range(150)]


def test_a_plain_open_works_a_queue_made_in_shared_mode_and_deletes_its_emptied_shards(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, shared=True) as q:
        q.put_many([f"p{n}" for n in range(100)])
        q.put("urgent", priority=-1)
    server = server_pid(path)
    wait_until(lambda: not alive(server), 30, "the queue's server to exit")
    for _ in range(2):  # twice: the second open finds the first one's shards
        with ackqueue.AckQueue(path) as q, q.connect() as c:
            first = c.get(timeout=5)
            assert first == "urgent" or first.startswith("p")
            c.nack(first)
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        urgent = c.get(timeout=5)
        assert urgent == "urgent"
        c.ack(urgent)
        got = [c.get(timeout=5) for _ in range(100)]
        assert got == [f"p{n}" for n in range(100)]
        c.ack_many(got)
        for n in range(3 * RETIRE_LAG // 100):  # churn: new shards made, emptied ones deleted
            q.put_many([n] * 100)
            c.ack_many(c.get_many(100, timeout=5))
        assert q.qsize() == 0
    db = ZODB.DB(path)
    try:
        with db.transaction() as conn:
            record = queues_of(conn.root(), create=False)["default"]
            # Only the newest blocks' emptied shards are left (RETIRE_LAG numbers' worth).
            assert len(record.entries.shards) <= RETIRE_LAG // SHARD_SEQS + 2
    finally:
        db.close()
    assert os.path.getsize(path) > 0


def test_a_queue_made_by_one_process_keeps_its_one_tree_in_shared_mode(
    tmp_path, monkeypatch
) -> None:
    """Only a queue made in shared mode is sharded: a file made by a plain open keeps format
    3 and its one tree when shared mode opens it (nothing is migrated), and works."""
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(["plain 1", "plain 2"])
    with ackqueue.AckQueue(path, shared=True) as q:
        q.put("shared")
        with q.connect() as c:
            got = [c.get(timeout=10) for _ in range(3)]
            c.ack_many(got)
    assert got == ["plain 1", "plain 2", "shared"]
    server = server_pid(path)
    wait_until(lambda: not alive(server), 30, "the queue's server to exit")
    db = ZODB.DB(path)
    try:
        with db.transaction() as conn:
            record = queues_of(conn.root(), create=False)["default"]
            assert record.format_version == 3
            assert not isinstance(record.entries, ShardedEntries)
    finally:
        db.close()


def test_a_shared_queues_count_leaves_out_only_its_own_holds(short_qpath) -> None:
    """Each session lists its holds of every queue of the database together; a queue's
    ``qsize()`` subtracted all of them, so holds on queue ``b`` made queue ``a`` look short
    (3 ready in ``a``, 2 held in ``b``: ``a.qsize()`` said 1)."""
    with ackqueue.AckQueue(short_qpath, shared=True, name="a") as a, \
            ackqueue.AckQueue(short_qpath, shared=True, name="b") as b:
        a.put_many(["a1", "a2", "a3"])
        b.put_many(["b1", "b2", "b3"])
        with b.connect() as c:
            held = [c.get(timeout=5), c.get(timeout=5)]
            a.put("a4")  # a commit: the estimates are counted again after it
            b.put("b4")
            assert (a.qsize(), b.qsize()) == (4, 2)
            c.ack_many(held)


def order_of_a_sole_consumer(q: ackqueue.AckQueue, n: int) -> list[object]:
    """The order in which a consumer of ``q`` (its process's first: it takes a first item
    to count among the takers) gets ``n`` items put after the takers were counted again."""
    q.put("first")
    with q.connect() as c:
        c.ack(c.get(timeout=10))
        time.sleep(3 * COUNT_SECONDS)  # the takers are counted again after the next commit
        q.put_many(list(range(n)))
        got = []
        for _ in range(n):
            got.append(c.get(timeout=10))
            c.ack(got[-1])
    return got


def test_a_sole_consumer_keeps_key_order_beside_a_process_taking_from_another_queue(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """Processes that take from a queue split its keys into stripes (each takes its own first),
    and a session that had taken from any queue of the database counted as one of them: a
    sole consumer of queue ``a`` beside another process consuming queue ``b`` took the even
    keys first, then the odd (0, 2, 4, ..., 1, 3, 5, ...)."""
    a = ackqueue.AckQueue(zeo_server.uri, name="a")
    db = ZEO.DB(zeo_server.addr)  # another client: as if another process
    b = ackqueue.AckQueue(db=db, name="b")
    try:
        b.put("b1")
        with b.connect() as other:
            other.ack(other.get(timeout=10))  # that session now takes from b
            assert order_of_a_sole_consumer(a, 12) == list(range(12))
    finally:
        a.close()
        b.close()
        db.close()


def test_a_process_that_closed_a_queue_is_no_longer_one_of_its_takers(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """A process that took from queue ``a``, then closed it but kept another queue of the
    database open, kept a stripe of ``a``: a sole consumer of ``a`` after it took the keys
    of its own stripe first (1, 3, 5, ..., then 0, 2, 4, ...)."""
    db = ZEO.DB(zeo_server.addr)  # another client: as if another process
    gone = ackqueue.AckQueue(db=db, name="a")
    kept = ackqueue.AckQueue(db=db, name="b")  # the session lives on with it
    a = ackqueue.AckQueue(zeo_server.uri, name="a")
    try:
        gone.put("taken")
        with gone.connect() as other:
            other.ack(other.get(timeout=10))
        gone.close()
        assert order_of_a_sole_consumer(a, 12) == list(range(12))
    finally:
        a.close()
        kept.close()
        db.close()


def test_a_process_that_stopped_taking_for_a_lease_leaves_the_stripes(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """A process that took from the queue once stayed one of its takers for as long as it
    lived: busy with a long job, or no longer getting, it kept a stripe, whose items waited
    until the others had emptied their own (a sole active consumer took the odd keys first).
    A session lists a queue only while it took from it within its lease."""
    lease = 1.0
    db = ZEO.DB(zeo_server.addr)  # another client: as if another process
    idle = ackqueue.AckQueue(db=db, session_timeout=lease)
    q = ackqueue.AckQueue(zeo_server.uri, session_timeout=lease)
    try:
        idle.put("taken")
        with idle.connect() as other:
            other.ack(other.get(timeout=10))
            time.sleep(2.5 * lease)  # its renewals since: no take within a lease
            assert order_of_a_sole_consumer(q, 12) == list(range(12))
    finally:
        q.close()
        idle.close()
        db.close()
