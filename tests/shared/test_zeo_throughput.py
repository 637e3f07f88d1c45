"""What keeps shared mode from slowing down as processes are added (issue 11, part 4).

* An ack marks its entry done; one sweeper deletes done entries later (sweeping.py), and a
  plain single-process open deletes any left over instead of delivering them again.
* Consuming sessions take keys from stripes of their own first (ready.py).
* A consumer working in a loop has its ack take its next items in the same commit, so its
  next get commits nothing (riding.py); what it does not come back for goes back.

Two clients of one real ZEO server in one process stand for two processes.
"""

from __future__ import annotations

import itertools
import pathlib
import time

import pytest
import transaction
import ZEO
import ZODB
import ZODB.Connection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polling import bounded, wait_until
from zeo_server import ZEOServer, two_clients, zeo_server  # noqa: F401 - the fixture

import ackqueue
from ackqueue.records import ShardedIndex, queues_of
from ackqueue.shared import riding
from ackqueue.shared.sweeping import SWEEP_GAP, SWEEP_SCAN
from ackqueue.storage.book import sweep_done


def stored(q: ackqueue.AckQueue) -> list[tuple[int, bool]]:
    """Every stored entry of ``q``'s queue as (key, done), read on a fresh connection."""
    conn = q._store.db.open()
    try:
        record = queues_of(conn.root(), create=False)[q.name]
        return [(key, bool(entry.done)) for key, entry in record.entry_items()]
    finally:
        conn.close()


def test_acks_only_mark_entries_done_and_the_sweeper_deletes_them(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q.put_many(["a", "b", "c"])
        item = c.get(timeout=10)
        assert item == "a"
        c.ack(item)
        # The count drops with the ack, not with the sweep (qsize is an estimate that the
        # watcher brings up to date).
        wait_until(lambda: q.qsize() == 2, 10, "the estimate to count the ack")
        assert len(stored(q)) in (2, 3)
        wait_until(lambda: [done for _, done in stored(q)] == [False, False], 10,
                   "the sweeper to delete the acked entry")
        got = [c.get(timeout=10), c.get(timeout=10)]
        assert got == ["b", "c"]  # the acked one never comes back
        c.ack_many(got)
        wait_until(lambda: stored(q) == [], 10, "the sweeper to delete the rest")


def test_a_plain_open_deletes_entries_left_done_and_never_delivers_them(tmp_path) -> None:
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(["acked in shared mode", "still queued"])
    # A file as shared mode can leave it when the last process exits before a sweep.
    db = ZODB.DB(path)
    with db.transaction() as conn:
        record = queues_of(conn.root(), create=False)["default"]
        record.change_entry(record.entries.minKey(), done=True, data=b"")
        record.length.change(-1)
        record.done_marks = True
    db.close()
    for _ in range(2):  # the second open finds nothing left to delete
        with ackqueue.AckQueue(path) as q:
            assert q.qsize() == 1
            assert [done for _, done in stored(q)] == [False]
            with q.connect() as c:
                item = c.get(timeout=5)
                assert item == "still queued"
                c.nack(item)


def test_two_consuming_sessions_take_from_stripes_of_their_own(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    with two_clients(zeo_server) as (q, other, c, o):
        q.put_many(list(range(40)))
        for consumer in (c, o):  # both are consuming sessions now
            consumer.nack(consumer.get(timeout=10))
        for queue in (q, other):
            index = queue._supply.ready
            wait_until(lambda index=index: index._stripes == 2 or index.refresh(), 10,
                       "both sessions to see two consuming sessions")
        mine = [c.get(timeout=10) for _ in range(8)]
        theirs = [o.get(timeout=10) for _ in range(8)]
        assert len({n % 2 for n in mine}) == 1, mine
        assert len({n % 2 for n in theirs}) == 1, theirs
        assert {n % 2 for n in mine} != {n % 2 for n in theirs}
        for item in mine:
            c.ack(item)
        for item in theirs:
            o.ack(item)


def test_a_consumer_beside_an_idle_consuming_session_still_gets_every_item(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """Stripes must not hide items: a consumer whose stripe is done steals from the head, so
    beside another consuming session that takes nothing (idle, or dead and not yet reaped)
    it still gets everything, not only its own stripe (found by the async kill test)."""
    with two_clients(zeo_server) as (q, _other, c, o):
        q.put_many(list(range(40)))
        o.nack(o.get(timeout=10))  # a consuming session, which then takes nothing
        c.nack(c.get(timeout=10))
        index = q._supply.ready
        wait_until(lambda: index._stripes == 2 or index.refresh(), 10,
                   "this session to see two consuming sessions")
        got = []
        for _ in bounded(100_000, "draining the queue"):
            try:
                got.append(c.get_nowait())
            except ackqueue.Empty:
                break
        assert sorted(got) == list(range(40))
        c.ack_many(got)


def test_a_consumer_in_a_loop_gets_its_next_item_without_a_commit(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q.put_many(list(range(6)))
        got = []
        for _ in range(2):  # the loop is seen: get soon after an ack
            got.append(c.get(timeout=10))
            c.ack(got[-1])
        commits = q._store.commits
        got.append(c.get(timeout=10))  # taken by the ack before it
        assert q._store.commits == commits
        c.ack(got[-1])
        got += [c.get(timeout=10) for _ in range(3)]
        for item in got[3:]:
            c.ack(item)
        assert got == list(range(6))
        assert q.qsize() == 0


@pytest.mark.parametrize("how", ["its wait ran out", "its consumer closed"])
def test_an_item_an_ack_took_goes_back_to_the_others_when_not_come_back_for(
    zeo_server: ZEOServer, monkeypatch: pytest.MonkeyPatch, how: str  # noqa: F811
) -> None:
    # Long enough that nothing runs out by accident on a loaded machine; closing must not wait.
    monkeypatch.setattr(riding, "RIDE_SECONDS", 3.0 if how == "its wait ran out" else 600.0)
    db = ZEO.DB(zeo_server.addr)
    try:
        with ackqueue.AckQueue(zeo_server.uri) as q, ackqueue.AckQueue(db=db) as other:
            with other.connect() as o:
                c = q.connect()
                q.put_many(["one", "two", "three"])
                for _ in range(2):
                    c.ack(c.get(timeout=10))  # the second ack takes "three" for c
                with pytest.raises(ackqueue.Empty):
                    o.get(block=False)  # held for c, in the store
                if how == "its consumer closed":
                    c.close()
                item = o.get(timeout=30)
                assert item == "three"
                o.ack(item)
                c.close()
            # q's count is an estimate that its watcher brings up to date: the ride that ran
            # out may have made "three" ready there before the other database's ack reached
            # it (CI, 2026-11-28: 1 ready, 0 held at once after the ack).
            wait_until(lambda: q.qsize() == 0, 10, "q's estimate to count the other's ack")
    finally:
        db.close()


def test_an_item_an_ack_took_is_not_handed_out_while_the_queue_is_paused(
    zeo_server: ZEOServer, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(riding, "RIDE_SECONDS", 2.0)
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q.put_many(["one", "two", "three"])
        for _ in range(2):
            c.ack(c.get(timeout=10))  # the second ack takes "three" for c
        q.pause()
        with pytest.raises(ackqueue.Empty):
            c.get(timeout=0.5)
        q.resume()
        item = c.get(timeout=30)  # once its wait ran out, it was given back in place
        assert item == "three"
        c.ack(item)


def test_the_sweepers_connection_is_open_once_the_queue_is(short_qpath) -> None:
    """The sweeper opened its connection in its own thread, whenever that ran: on a busy
    machine, after the test had stopped the database server (test_postgresql's outage test),
    and the thread died of it, leaving a half-opened connection that failed the queue's close.
    It is opened while the queue opens, which needs the server anyway."""
    with ackqueue.AckQueue(short_qpath, shared=True) as q:
        sweeper = q._mode.session._sweeper
        assert sweeper._conn.opened is not None  # open, before its thread did anything
        assert sweeper._thread.is_alive()


def ghosts(conn: ZODB.Connection.Connection, name: str, keys: list[int]) -> list[bool]:
    """Whether each stored entry of ``keys`` is a ghost on ``conn``: never loaded there, or
    invalidated since (an entry no longer stored counts as one)."""
    conn.transaction_manager.begin()  # see the latest commits
    record = queues_of(conn.root(), create=False)[name]
    found = [record.entries.get(key) for key in keys]
    return [entry is None or entry._p_changed is None for entry in found]


def look_from_the_head(q: ackqueue.AckQueue, keys: list[int]) -> tuple[bool, list[bool]]:
    """Send ``q``'s look for the next ready item back to the head, as another process's commit
    does, under the mutex the watcher looks under (on the same reader connection); whether it
    found a ready item, and whether each entry of ``keys`` stayed a ghost meanwhile."""
    with q._signals.mutex:
        index = q._supply.ready
        index.refresh()
        return len(index) > 0, ghosts(q._book._reader._conn, q.name, keys)


def test_a_look_from_the_head_skips_the_entries_this_process_acked_without_loading_them(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """Acked entries stay marked done until the sweeper deletes them, and every commit
    anywhere sends the ready index back to the head: it used to load each of them (a round
    trip to the server) at every look."""
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q._mode.session._sweeper.stop()  # the done entries stay
        q.put_many(list(range(30)))
        acked = []
        for _ in range(20):
            item = c.get(timeout=10)
            acked.append(item)
            c.ack(item)
        keys = [key for key, _ in stored(q)[:20]]
        assert [done for _, done in stored(q)[:20]] == [True] * 20
        found, unloaded = look_from_the_head(q, keys)
        assert found  # the next ready one...
        assert all(unloaded), "...without loading the acked entries"
        item = c.get(timeout=10)
        assert item == 20
        c.ack(item)


def test_a_look_from_the_head_passes_over_entries_not_yet_due_without_loading_them(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """Items put with a delay stay in their place in the entries until due, and every commit
    anywhere sends the ready index back to the head: it loaded each of them (a round trip to
    the server, or a read of its cache) at every look, so with jobs put hours ahead every put
    and ack cost more with each one (a put took 16 ms of CPU with 3,000 delayed)."""
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q.put_many(list(range(40)), delay=3600)
        q.put("due")
        keys = [key for key, _ in stored(q)[:40]]
        found, unloaded = look_from_the_head(q, keys)
        assert found  # the one that is due...
        assert all(unloaded), "...without loading the delayed entries"
        item = c.get(timeout=10)
        assert item == "due"
        c.ack(item)


def test_a_look_from_the_head_passes_a_block_of_entries_not_yet_due_without_a_lookup_a_key(
    zeo_server: ZEOServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs put ahead come in runs: a look passes a block of 64 entries that all wait at a
    few range reads of the delay index, where a lookup a key was still most of a put's CPU
    with 8,000 delayed (the look runs at every commit anywhere)."""
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q.put_many(list(range(300)), delay=3600)
        q.put("due")
        lookups = []
        looked_up = ShardedIndex.get

        def get(index: ShardedIndex, key: object, default: object = None) -> object:
            lookups.append(key)
            return looked_up(index, key, default)

        monkeypatch.setattr(ShardedIndex, "get", get)
        found, _ = look_from_the_head(q, [])
        monkeypatch.undo()
        assert found
        # One a block (each block's first key, then the range reads) and the one due.
        assert len(lookups) <= 300 // 64 + 3, lookups
        item = c.get(timeout=10)
        assert item == "due"
        c.ack(item)
        assert q.delayed_count() == 300


RUN_KINDS = ("ready", "later", "soon")  # put at once; an hour ahead; due before the gets


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(runs=st.lists(st.tuples(st.sampled_from(RUN_KINDS), st.integers(1, 140)),
                     min_size=1, max_size=5))
@example(runs=[("later", 10), ("ready", 5)])  # a block that waits, then does not
@example(runs=[("later", 70), ("soon", 3), ("later", 40), ("ready", 2)])
@example(runs=[("ready", 2), ("later", 130), ("ready", 1)])
def test_gets_in_shared_mode_find_what_is_due_among_blocks_of_entries_that_wait(
    zeo_server: ZEOServer,  # noqa: F811
    runs: list[tuple[str, int]],
) -> None:
    """Whatever the mix of entries that wait, that fell due and that were never delayed (runs
    across and within blocks of 64 keys), gets deliver exactly the due ones, in their order:
    a block is passed over whole only when every entry of it waits."""
    name = f"q{next(EXAMPLES)}"
    with ackqueue.AckQueue(zeo_server.uri, name=name) as q, q.connect() as c:
        expected = []
        for number, (kind, size) in enumerate(runs):
            items = [f"{number}-{kind}-{n}" for n in range(size)]
            delay = {"ready": None, "later": 3600.0, "soon": 0.3}[kind]
            q.put_many(items, delay=delay)
            if kind != "later":
                expected += items
        time.sleep(0.4)  # the soon ones fall due
        got = []
        for _ in range(min(3, len(expected))):
            got.append(c.get(timeout=10))
            c.ack(got[-1])
        assert got == expected[:3]
        if len(expected) <= 3:
            with pytest.raises(ackqueue.Empty):
                c.get(timeout=0.3)


EXAMPLES = itertools.count()


def test_a_queue_made_by_one_process_passes_its_waiting_entries_in_shared_mode(
    tmp_path: pathlib.Path,
) -> None:
    """A queue made by a single process keeps one tree of entries and one delay index when
    processes share it later; blocks of waiting entries are passed the same way there."""
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(["first-later"], delay=3600)  # its delay index: one tree
    with ackqueue.AckQueue(path, shared=True) as q, q.connect() as c:
        q.put_many([f"later-{n}" for n in range(150)], delay=3600)
        q.put_many(["soon"], delay=0.3)
        q.put_many([f"later-{n}" for n in range(150, 200)], delay=3600)
        q.put("ready")
        time.sleep(0.4)
        assert c.get(timeout=10) == "soon"
        assert c.get(timeout=10) == "ready"
        with pytest.raises(ackqueue.Empty):
            c.get(timeout=0.3)
        assert q.delayed_count() == 201


def test_a_sweep_looks_past_held_entries_but_only_a_little_past_the_consumers(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """Done entries behind many held ones are swept (held entries are where consumers work,
    not the end of their reach); past ``gap`` entries in a row that nobody holds, a round
    stops: looking further loaded entries only to load them again once done (the sweeper's
    rounds use SWEEP_GAP, which must stay small for that)."""
    assert SWEEP_GAP <= 16
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        q._mode.session._sweeper.stop()
        q.put_many(list(range(200)))
        held = c.get_many(40, timeout=10)  # 0..39 held
        c.ack_many(held[30:])  # 30..39 done, behind 30 held entries
        conn = q._store.db.open(transaction_manager=transaction.TransactionManager())
        try:
            keys = [key for key, _ in stored(q)]
            conn.transaction_manager.begin()
            record = queues_of(conn.root(), create=False)[q.name]
            gap = 8  # fewer than the held entries in a row
            assert sweep_done(record, SWEEP_SCAN, gap) == 10
            conn.transaction_manager.commit()
            assert [key for key, _ in stored(q)] == keys[:30] + keys[40:]
            # Entries 40.. are free: a round loaded at most two chunks of ``gap`` of them.
            loaded = [not ghost for ghost in ghosts(conn, q.name, keys[40:])]
            assert sum(loaded) <= 2 * gap, sum(loaded)
        finally:
            conn.close()
        c.ack_many(held[:30])
