"""Interleavings of threads and processes sharing a queue over ZEO, replayed step by step.

In shared mode a thread may find a new item in the store (the watcher refreshed the view after
the put's commit) and take it before the thread that put it has made it ready in memory. That
late "ready" must not give the taker's hold away: once it did, the item went to another process
while its taker still worked on it, and the taker's ack failed with LeaseExpiredError. And
another process may act between a get's look at the store and the commit of its take: delay
the item, or reap this process's session.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ZEO
from polling import wait_until
from zeo_server import ZEOServer, two_clients, zeo_server  # noqa: F401 - the fixture

import ackqueue


def held_key(c: ackqueue.Consumer, item: object) -> object:
    hold = c._table.find(item)
    assert hold is not None
    return hold.key


@pytest.mark.parametrize("late", ["put landing", "delay falling due"])
def test_a_late_ready_for_an_item_already_taken_here_keeps_it_held(
    zeo_server: ZEOServer, late: str  # noqa: F811
) -> None:
    db = ZEO.DB(zeo_server.addr)  # another client: as if another process
    try:
        with ackqueue.AckQueue(zeo_server.uri) as q, ackqueue.AckQueue(db=db) as other:
            run(q, other, late)
    finally:
        db.close()


def run(q: ackqueue.AckQueue, other: ackqueue.AckQueue, late: str) -> None:
    with q.connect() as c, other.connect() as o:
        q.put("job")
        item = c.get(timeout=10)
        key = held_key(c, item)
        # Replay what the putting thread (or the delay's timer) does last, after the take.
        with q.mutex:
            if late == "put landing":
                q._supply.land_locked(key, 0.0)
            else:
                q._supply.delays.pending[key] = (key, 0.0)
                q._supply._fall_due_callback(key)()
        with pytest.raises(ackqueue.Empty):
            o.get(timeout=0.5)  # still held by c, in the store too
        c.ack(item)  # raised LeaseExpiredError when the late ready gave the hold away
    assert q.qsize() == 0


@pytest.mark.parametrize("how", ["get", "plain get"])
def test_an_item_another_process_delays_between_the_look_and_the_take_is_not_handed_out(
    zeo_server: ZEOServer, how: str  # noqa: F811
) -> None:
    """A get looks at its snapshot of the store (the item is ready), then commits its take in
    a transaction of its own. If another process took the item and gave it back with a delay
    in between, the take found it neither held nor done and took it: handed out an hour
    early (a review's two processes: most of what one of them got, 3 runs of 3). The take
    checks the due time too."""
    with two_clients(zeo_server) as (q, other, c, o):
        q.put("job")

        def delay_it() -> None:
            o.nack(o.get(timeout=10), delay=3600)

        with pytest.raises(ackqueue.Empty), before_the_first_take(q, delay_it):
            if how == "get":
                c.get(timeout=1)
            else:
                q.get(timeout=1)
        assert q.unacked_count() == 0 and other.delayed_count() == 1


def test_an_item_taken_by_a_session_reaped_meanwhile_comes_back(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """A take checks its session is live, then commits its hold. If another process reaped
    the session in between (this one was stopped past its lease), neither commit writes what
    the other read: the hold was stored under a session that no longer exists, which no reap
    would ever clear, and no process could get the item again (a review: 4 runs of 7 with a
    SIGSTOP in that window). A hold whose session is gone is void."""
    with two_clients(zeo_server) as (q, other, c, o):
        leave_a_void_hold(q, other, c)
        assert o.get(timeout=10) == "job"


def leave_a_void_hold(
    q: ackqueue.AckQueue, other: ackqueue.AckQueue, c: Any, **put: Any
) -> None:
    """Put "job" on ``q`` (with ``put``'s keywords) and have ``c`` take it while ``other``
    reaps ``q``'s session inside that take: its hold is stored under a session no longer
    listed (void)."""
    # A take of this session's first marks it as one that takes items, a write that a reap
    # racing it conflicts with: the race is with a later take.
    q.put("first")
    c.ack(c.get(timeout=10))
    q.put("job", **put)

    def reap_it() -> None:  # the other process finds this session lapsed, an hour on
        other._mode.session.reap(time.time() + 3600)

    with contextlib.suppress(ackqueue.Empty), before_the_first_take(q, reap_it):
        c.get(timeout=1)  # whatever it got, its hold is void
    q._mode.session.confirm()  # this process learns its session was reaped


@contextlib.contextmanager
def before_the_first_take(q: ackqueue.AckQueue, meddle: Callable[[], None]) -> Iterator[None]:
    """Run ``meddle`` (another process's doing) once, inside the next take's transaction:
    after this process's look found the item ready, before its take is committed."""
    mode = q._mode
    real = mode._take_change
    meddled: list[bool] = []

    def take_change(claims: list[Any], remove: bool) -> Callable[[], Any]:
        take = real(claims, remove)

        def meddling_take() -> Any:
            if not meddled:
                meddled.append(True)
                meddle()
            return take()

        return meddling_take

    mode._take_change = take_change
    try:
        yield
    finally:
        mode._take_change = real


@pytest.mark.parametrize("action", ["remove", "put replace"])
def test_a_keyed_item_under_a_void_hold_can_be_removed_or_replaced_by_key(
    zeo_server: ZEOServer, action: str  # noqa: F811
) -> None:
    """The void hold of the test above no longer blocked a get; it still blocked a remove by
    key (KeyHeldError) and a put by key with ``replace=True`` (answered False: "held"), until
    some process got the item and settled it."""
    with two_clients(zeo_server) as (q, other, c, o):
        leave_a_void_hold(q, other, c, key="k")
        # The other client hands the item out again once its view has the put and the take
        # under the reaped session (ZEO's invalidations, then its watcher's next look): until
        # then it answers "held", or "no live item" before the put reached it, as for any
        # commit of another process it has not seen yet (CI once asked at once: False).
        deadline = time.monotonic() + 10
        if action == "remove":
            while True:
                try:
                    other.remove("k")
                    break
                except (ackqueue.KeyHeldError, ackqueue.UnknownKeyError):
                    assert time.monotonic() < deadline, "the void hold still blocks remove()"
                    time.sleep(0.05)
            with pytest.raises(ackqueue.Empty):
                o.get(timeout=0.5)
            # Each process's count follows once its view has the removal.
            while (other.qsize(), q.qsize()) != (0, 0) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (other.qsize(), q.qsize()) == (0, 0)
        else:
            while not other.put("new job", key="k", replace=True):
                assert time.monotonic() < deadline, "the void hold still blocks a put by key"
                time.sleep(0.05)
            assert o.get(timeout=10) == "new job"


def test_an_item_removed_by_key_between_the_look_and_the_take_is_not_handed_out(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """A remove by key wrote the tree and the key index, a take only the entry: neither
    conflicted, and the item was both removed and delivered, its ack failing as 'acked
    already' (a review: 24-31 of 200 keys in 3 runs of 3)."""
    with two_clients(zeo_server) as (q, other, c, o):
        q.put("job", key="k")
        wait_until(lambda: other.qsize() == 1, 10, "the other client's view of the put")
        with pytest.raises(ackqueue.Empty), before_the_first_take(q, lambda: other.remove("k")):
            c.get(timeout=1)
        assert c.deliveries() == [] and q.unacked_count() == 0


def test_an_item_replaced_by_key_between_the_look_and_the_take_is_handed_out_new(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """A get loads the payload, then commits its hold: a put by key with ``replace=True`` in
    between answered True, and the get handed out the old payload, whose ack then deleted the
    new one (a review: 11-20 of 300 keys in 3 runs of 3)."""
    with two_clients(zeo_server) as (q, other, c, o):
        q.put("old", key="k")
        wait_until(lambda: other.qsize() == 1, 10, "the other client's view of the put")

        def replace_it() -> None:
            assert other.put("new", key="k", replace=True) is True

        with before_the_first_take(q, replace_it):
            got = c.get(timeout=10)
        assert got == "new"
        c.ack(got)
        wait_until(lambda: other.qsize() == 0, 10, "the other client's view of the ack")
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_remove_group_while_another_process_takes_from_it_removes_the_rest(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """remove_group writes every waiting entry of the group, so that a take racing it
    conflicts; with another process taking from a big group, that one commit conflicted
    until it gave up (StorageError; a review: 2 runs of 3 with 1,000 items and 2 consumer
    processes). The group is paused for the removal, and its pause put back after."""
    import threading

    n = 1000
    with two_clients(zeo_server) as (q, other, c, o):
        q.put_many(range(n), group="g")
        wait_until(lambda: other.qsize() == n, 10, "the other client's view of the puts")
        delivered: list[int] = []
        stop = threading.Event()

        def consume() -> None:
            with other.connect() as mine:
                while not stop.is_set():
                    try:
                        item = mine.get(timeout=0.5)
                    except ackqueue.Empty:
                        continue
                    mine.ack(item)
                    delivered.append(item)

        workers = [threading.Thread(target=consume) for _ in range(2)]
        for worker in workers:
            worker.start()
        try:
            wait_until(lambda: len(delivered) >= 20, 20, "the consumers at work")
            removed = q.remove_group("g")
        finally:
            time.sleep(0.5)
            stop.set()
            for worker in workers:
                worker.join(10)
        assert removed + len(delivered) == n and len(set(delivered)) == len(delivered)
        q.put("after", group="g")  # the group's pause is back as it was: none
        assert c.get(timeout=10) == "after"


def test_remove_group_removes_an_item_under_a_void_hold(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    """The void hold of the tests above (a take committed after its session was reaped) no
    longer blocked a get, a remove or a replace by key; remove_group still skipped the item
    as held and answered 0, so a group meant to be gone went on being delivered."""
    with two_clients(zeo_server) as (q, other, c, o):
        leave_a_void_hold(q, other, c, group="g")
        assert other.remove_group("g") == 1
        with pytest.raises(ackqueue.Empty):
            o.get(timeout=0.5)
        wait_until(lambda: (other.qsize(), q.qsize()) == (0, 0), 10,
                   "each process's view of the removal")


@pytest.mark.parametrize("failing", ["removal and resume", "resume"])
def test_remove_group_raises_the_removals_error_before_its_resumes(
    zeo_server: ZEOServer, failing: str, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """remove_group pauses its group, removes, and puts the pause back. When the removal
    failed and putting the pause back failed too, the caller saw only the second error, and
    not why nothing was removed; that failure is logged instead. When only the resume fails,
    its error is raised: the group would stay paused, unsaid, for up to REMOVAL_PAUSE."""
    caplog.set_level(logging.WARNING, logger="ackqueue")
    with two_clients(zeo_server) as (q, other, c, o):
        q.put_many(["a", "b"], group="g")
        store = q._mode._store
        real = store.run

        def run(change: Callable[[], Any]) -> Any:
            made_by = change.__qualname__
            if failing == "removal and resume" and made_by.startswith("group_remover."):
                raise ackqueue.StorageError("the removal failed")
            if made_by.startswith("group_pause_restorer."):
                raise ackqueue.StorageError("the resume failed")
            return real(change)

        monkeypatch.setattr(store, "run", run)
        if failing == "removal and resume":
            with pytest.raises(ackqueue.StorageError, match="the removal failed"):
                q.remove_group("g")
            told = [r for r in caplog.records
                    if r.name == "ackqueue" and "'g'" in r.getMessage()]
            assert told and told[0].levelno >= logging.WARNING
        else:
            with pytest.raises(ackqueue.StorageError, match="the resume failed"):
                q.remove_group("g")
        monkeypatch.undo()
        q.pause_group("g", 0)  # what the failed resume would have done
        if failing == "removal and resume":
            assert sorted(c.get(timeout=10) for _ in range(2)) == ["a", "b"]
        else:
            with pytest.raises(ackqueue.Empty):  # the removal itself committed
                c.get(timeout=0.5)


@pytest.mark.parametrize(
    "others_paused", [0, 100, None], ids=["small index", "index of buckets", "no index"]
)
def test_a_take_racing_a_pause_of_its_group_does_not_deliver_after_the_pause_returned(
    zeo_server: ZEOServer, others_paused: int | None  # noqa: F811
) -> None:
    """A take reads the group's pause inside its commit; a pause committed by another process
    after the take's look but before its commit wrote nothing the take wrote, so the take
    committed and delivered an item of a group whose pause_group had already returned. With
    100 other groups paused the index is several buckets, and the pause changes only one; a
    file from before 2026-11-27 may have grouped entries and no pause index yet."""
    with two_clients(zeo_server) as (q, other, c, o):
        for n in range(others_paused or 0):
            other.pause_group(f"other{n}", 3600)
        q.put("job", group="g")
        if others_paused is None:
            record = q._book.record
            q._store.run(lambda: setattr(record, "group_pauses", None))
            # The other process must have that in its view: one that still had the index of
            # the put's commit wrote its pause into that orphan, out of the take's reach.
            mine = other._book.record
            wait_until(
                lambda: other._store.run(lambda: mine.group_pauses is None), 10, "no index"
            )
        with pytest.raises(ackqueue.Empty), before_the_first_take(
            q, lambda: other.pause_group("g", 3600)
        ):
            c.get(timeout=1)
        other.pause_group("g", 0)
        assert o.get(timeout=10) == "job"  # held by nobody: the take did not commit


def test_a_take_racing_a_pause_of_the_queue_does_not_deliver_after_the_pause_returned(
    zeo_server: ZEOServer  # noqa: F811
) -> None:
    """A take read the queue's pause only at the watcher's last refresh: a q.pause() another
    process committed after the take's look but before its commit wrote nothing the take
    read or wrote, so the take committed and handed the item out after pause() had returned
    there (the contract: a paused queue hands nothing out, in any process)."""
    with two_clients(zeo_server) as (q, other, c, o):
        q.put("job")
        with pytest.raises(ackqueue.Empty), before_the_first_take(q, other.pause):
            c.get(timeout=1)
        assert q.paused  # learnt from the take that met the pause, or the watcher
        other.resume()
        assert o.get(timeout=10) == "job"  # held by nobody: the take did not commit


def test_a_take_does_not_conflict_with_another_process_reserving_sequence_numbers(
    zeo_server: ZEOServer, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    """A take reads the queue's pause as current; read from the queue record itself, every
    block of sequence numbers another process reserved (a put every 64, or every second)
    failed the takes committing meanwhile (a review, 2026-11-27: 174 conflicts in 10 s with
    one producer putting in bulk, against 1). The pause has a count of its own to read."""
    with two_clients(zeo_server) as (q, other, c, o):
        q.put("job")
        other.put("theirs")  # its first block: the next put of its own reserves none
        caplog.set_level(logging.DEBUG, logger="ackqueue")
        with before_the_first_take(q, lambda: other.put_many(list(range(70)))):
            assert c.get(timeout=10) == "job"
        assert not [r for r in caplog.records if "conflict on commit" in r.getMessage()]
