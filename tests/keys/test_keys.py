"""Puts by key beyond the model: due times, held items, bad input, transactions, dead letters,
pack, old files and the other queue kinds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest
from conftest import TESTS_DIR

import ackqueue
from ackqueue import ManualClock


@pytest.fixture
def path(tmp_path) -> str:
    return os.path.join(tmp_path, "q.fs")


def drain(q: ackqueue.AckQueue) -> list[object]:
    return [q.get_nowait() for _ in range(q.qsize())]


def test_an_earlier_due_time_wins_without_replace(path):
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        assert q.put("first", key="k", delay=100) is True
        assert q.delayed_count() == 1 and q.qsize() == 0
        assert q.put("second", key="k", delay=500) is False  # later: nothing changes
        assert q.delayed_count() == 1
        assert q.put("third", key="k") is False  # at once: the waiting item comes now
        assert q.delayed_count() == 0
        assert drain(q) == ["first"]  # its payload is unchanged
    with ackqueue.AckQueue(path, clock=clock) as q:
        assert q.qsize() == 0 and q.delayed_count() == 0


def test_replace_changes_payload_and_due_time_and_survives_a_restart(path):
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        q.put("old", key="k")
        q.put("x", key="x")
        assert q.put("new", key="k", replace=True, delay=50) is True
        assert q.qsize() == 1 and q.delayed_count() == 1
    with ackqueue.AckQueue(path, clock=clock) as q:
        assert q.delayed_count() == 1
        assert q.put("newer", key="k", replace=True) is True  # no delay given: keeps its due
        clock.advance(60)
        assert drain(q) == ["newer", "x"]  # once due, in its place (put order)


def test_a_held_item_is_neither_replaced_nor_removed(path):
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        q.put("v1", key="k")
        got = c.get(timeout=5)
        assert q.put("v2", key="k", replace=True) is False
        with pytest.raises(ackqueue.KeyHeldError, match="held by a consumer"):
            q.remove("k")
        c.nack(got)
        assert q.put("v3", key="k", replace=True) is True
        assert c.get(timeout=5) == "v3"


def test_bad_input_is_a_clear_error_and_stores_nothing(path):
    with ackqueue.AckQueue(path) as q:
        for bad in (5, None, ("a",), 1.5):
            with pytest.raises(TypeError, match="must be a str or bytes"):
                q.put_many(["a"], keys=[bad])
        with pytest.raises(ackqueue.KeyTypeError):
            q.put("a", key=b"ok" if False else 7)  # type: ignore[arg-type]
        for bad_scope in (0, -1, "always", float("nan"), True):
            with pytest.raises(ValueError, match="unique must be"):
                q.put("a", key="k", unique=bad_scope)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="give key="):
            q.put("a", unique="forever")
        with pytest.raises(ValueError, match="one key per item"):
            q.put_many(["a", "b"], keys=["k"])
        with pytest.raises(ackqueue.UnknownKeyError, match="no live item with key 'nope'"):
            q.remove("nope")
        assert q.qsize() == 0 and not q.seen("k")
        assert q.put("a", key="k") is True  # nothing was left half-done
    with pytest.raises(ValueError, match="unique must be"):
        ackqueue.AckQueue(path, unique=-5)


def test_a_transaction_commits_keys_with_the_rest_or_not_at_all(path):
    with ackqueue.AckQueue(path, unique="forever") as q, q.connect() as c:
        q.put("page", key="p")
        page = c.get(timeout=5)
        with pytest.raises(RuntimeError), c.transaction():
            c.ack(page)
            assert q.put("link1", key="l1") is True
            assert q.put("link1 again", key="l1") is False  # live in this transaction
            raise RuntimeError("crash in the middle of the step")
        assert not q.seen("p") and q.qsize() == 0 and q.unacked_count() == 1
        assert q.put("link1", key="l1") is True  # the rolled-back put left no trace
        q.remove("l1")
        with c.transaction():
            c.ack(page)
            q.put_many(["link1", "link2"], keys=["l1", "l2"])
        assert q.seen("p") and drain(q) == ["link1", "link2"]
        assert q.put("page", key="p") is False


def test_ttl_expires_at_put_time_and_forget_lets_a_key_in(path):
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock, unique=30) as q:
        q.put("a", key="a")
        assert q.get_nowait() == "a"
        assert q.seen("a") and q.put("a2", key="a") is False
        clock.advance(31)
        assert not q.seen("a") and q.put("a3", key="a") is True
        assert q.get_nowait() == "a3"
        assert q.forget("a") is True and q.forget("a") is False
        assert q.put("a4", key="a", unique="forever") is True


def test_seen_count_counts_the_keys_remembered_now(path):
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        assert q.seen_count() == 0  # no seen-set yet
        q.put_many(["a", "b", "c"], keys=["a", "b", "c"], unique=30)
        q.put("d", key="d", unique="forever")
        q.put("e", key="e")  # not remembered once done
        assert q.seen_count() == 0  # waiting, not done
        drain(q)
        assert q.seen_count() == 4
        clock.advance(31)
        assert q.seen_count() == 1  # the three expired ones are not remembered
        q.forget("d")
        assert q.seen_count() == 0


def test_a_dead_letter_frees_its_key_and_requeue_brings_it_back_without_one(path):
    with ackqueue.AckQueue(path, unique="forever") as q, q.connect() as c:
        q.put("poison", key="k")
        c.reject(c.get(timeout=5), "bad")
        assert not q.seen("k") and q.put("retry", key="k") is True
        assert q.requeue_dead() == 1
        assert q.put("again", key="k") is False  # "retry" is live with the key
        assert drain(q) == ["retry", "poison"]


def test_pack_and_reopen_keep_the_seen_set(path):
    with ackqueue.AckQueue(path, unique="forever", autopack=False) as q:
        q.put_many([f"u{i}" for i in range(300)], keys=[f"u{i}" for i in range(300)])
        drain(q)
        q.pack()
        assert all(q.seen(f"u{i}") for i in range(300))
    with ackqueue.AckQueue(path) as q:
        assert q.put_many(["x", "y"], keys=["u7", "new"]) == [False, True]


def test_an_old_file_takes_keyed_puts(tmp_path):
    old = os.path.join(tmp_path, "old.fs")
    shutil.copyfile(os.path.join(TESTS_DIR, "data", "written_by_26e4f63.fs"), old)
    with ackqueue.AckQueue(old, name="jobs", max_attempts=3) as q:
        before = q.qsize()
        assert q.put("new", key="n", unique="forever") is True
        assert q.put("dup", key="n") is False
        assert q.remove_where(lambda item: item == "new") == 1
        assert q.qsize() == before


@pytest.mark.parametrize("kind", [ackqueue.LifoAckQueue, ackqueue.PriorityAckQueue])
def test_other_kinds_take_keys(path, kind):
    with kind(path, unique="forever") as q:
        assert q.put_many([3, 1, 2], keys=["c", "a", "b"]) == [True] * 3
        assert q.put(0, key="a", replace=True) is True
        q.remove("b")
        got = drain(q)
        assert sorted(got) == [0, 3]
        assert q.put(9, key="a") is False


def test_remove_where_skips_held_items_and_frees_keys(path):
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        q.put_many([1, 2, 3, 4], keys=["a", "b", "c", "d"])
        held = c.get(timeout=5)
        assert q.remove_where(lambda n: n % 2 == 1) == 1  # 1 is held, 3 goes
        assert q.put(30, key="c") is True and q.put(10, key="a") is False
        c.ack(held)
        assert drain(q) == [2, 4, 30]


def test_a_plain_put_still_returns_none(path):
    with ackqueue.AckQueue(path) as q:
        assert q.put("x") is None and q.put_many(["y"]) is None


@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "shared"])
def test_delayed_items_are_removed_and_advanced_after_a_reopen(path, shared):
    clock = ManualClock()
    options = {"clock": clock, "shared": shared or None}
    with ackqueue.AckQueue(path, **options) as q:
        q.put_many(["a", "b", "c"], keys=["a", "b", "c"], delay=100)
    with ackqueue.AckQueue(path, **options) as q:
        assert q.delayed_count() == 3
        q.remove("a")
        assert q.put("b now", key="b") is False  # no delay: the waiting "b" comes now
        assert q.get(timeout=10) == "b"
        clock.advance(101)
        assert q.get(timeout=10) == "c"
        with pytest.raises(ackqueue.UnknownKeyError):
            q.remove("a")


def race_one_key(q: ackqueue.AckQueue[int], key: str, threads: int) -> list[bool | None]:
    """What ``threads`` puts of ``key``, started at once, answered."""
    start = threading.Barrier(threads)
    answers: list[bool | None] = []
    lock = threading.Lock()

    def put(n: int) -> None:
        start.wait()
        answer = q.put(n, key=key)
        with lock:
            answers.append(answer)

    racers = [threading.Thread(target=put, args=(n,)) for n in range(threads)]
    for t in racers:
        t.start()
    for t in racers:
        t.join()
    return answers


def test_threads_racing_to_put_one_key_store_it_once_and_count_it_once(qpath):
    """Puts of one key from threads at once share a commit, where all but the first find the
    key taken: those answer False, and nothing of them is counted or handed out (a put that
    answered False must not land as ready: the queue would count an item it does not hold)."""
    for round_ in range(20):
        with ackqueue.AckQueue(qpath) as q:
            answers = race_one_key(q, f"race-{round_}", 6)
            assert sorted(answers, key=bool) == [False] * 5 + [True], answers
            assert q.qsize() == 1 and q.unfinished_tasks == 1, (answers, q.qsize())
            with q.connect() as c:
                c.ack(c.get_nowait())
                with pytest.raises(ackqueue.Empty):
                    c.get_nowait()
            assert q.qsize() == 0


@pytest.mark.parametrize("who", ["this process", "another process"])
def test_a_payload_replaced_before_its_first_delivery_is_what_the_get_returns(path, who):
    """A put by key keeps its pickle for the get that hands it out (delivery/itemcache.py);
    a revisit that replaces the payload first, in this process or another sharing the file,
    must not leave the old pickle to be handed out."""
    shared = who == "another process"
    with ackqueue.AckQueue(path, shared=shared) as q:
        assert q.put("v1", key="k") is True
        q.put("plain")
        if shared:
            replace = (
                "import sys, ackqueue\n"
                "with ackqueue.AckQueue(sys.argv[1], shared=True) as other:\n"
                "    print(other.put('v2', key='k', replace=True))\n"
            )
            out = subprocess.run([sys.executable, "-c", replace, path], capture_output=True,
                                 text=True, timeout=60, check=True)
            assert out.stdout.strip() == "True"
        else:
            assert q.put("v2", key="k", replace=True) is True
        with q.connect() as c:
            got = c.get(timeout=10)
            assert got == "v2"
            c.ack(got)
        assert drain(q) == ["plain"]


def test_a_payload_replaced_with_a_later_due_time_waits_for_it(path):
    """The first put's timer still ran when its time came, and took the item (due later now)
    out of the delayed ones: handed out at the old time (a review: got after 1 s, due at 4),
    though a reopen would have kept it waiting. The same for an item given back with a
    longer delay than the one it had."""
    clock = ManualClock()
    with ackqueue.AckQueue(path, clock=clock) as q:
        assert q.put("v1", key="k", delay=10) is True
        assert q.put("v2", key="k", replace=True, delay=40) is True
        clock.advance(11)
        assert q.qsize() == 0 and q.delayed_count() == 1
        clock.advance(30)
        assert q.qsize() == 1 and q.get_nowait() == "v2"
        assert q.put("job", key="j", delay=10) is True
        assert q.put("job", key="j") is False  # due at once: its timer is still set for 10 s
        with q.connect() as c:
            job = c.get_nowait()
            c.nack(job, delay=30)
            clock.advance(11)
            assert q.qsize() == 0 and q.delayed_count() == 1
            clock.advance(20)
            assert c.get_nowait() == "job"
