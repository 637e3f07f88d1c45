"""What each call by key passes on: bad options, a full queue's block and timeout, groups and
replace in a batch, removals and forgets inside a transaction block, a removal making room and
counting the item done, a replaced payload on the next get. Written for the survivors of a
mutation run of ackqueue/queue/keying.py (benchmarks/mutation_survivors.rst)."""

from __future__ import annotations

import os
import queue
import threading
import time

import pytest

import ackqueue


@pytest.fixture
def path(tmp_path) -> str:
    return os.path.join(tmp_path, "q.fs")


def test_unique_or_replace_without_a_key_is_an_error_and_stores_nothing(path) -> None:
    with ackqueue.AckQueue(path) as q:
        for call in [
            lambda: q.put("x", replace=True),
            lambda: q.put("x", unique="forever"),
            lambda: q.put_many(["x"], replace=True),
            lambda: q.put_many(["x"], unique=30),
        ]:
            with pytest.raises(ValueError, match=r"^unique= and replace= apply to puts by key"):
                call()
        assert q.qsize() == 0


def test_a_bad_group_for_a_put_by_key_is_an_error_and_stores_nothing(path) -> None:
    with ackqueue.AckQueue(path) as q:
        with pytest.raises(TypeError, match="group"):
            q.put("x", key="k", group=12)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="group"):
            q.put_many(["x"], keys=["k"], group=12)  # type: ignore[arg-type]
        assert q.qsize() == 0 and q.put("x", key="k") is True


def test_puts_by_key_into_a_full_queue_keep_block_and_timeout(path) -> None:
    with ackqueue.AckQueue(path, maxsize=1) as q:
        assert q.put("a", key="a") is True
        for call in [
            lambda **wait: q.put("b", key="b", **wait),
            lambda **wait: q.put_many(["b"], keys=["b"], **wait),
        ]:
            with pytest.raises(queue.Full):
                call(block=False)
            started = time.monotonic()
            with pytest.raises(queue.Full):
                call(timeout=0.2)
            assert time.monotonic() - started >= 0.2
        assert q.qsize() == 1


def test_a_batch_by_key_keeps_its_group_and_replaces_with_replace(path) -> None:
    with ackqueue.AckQueue(path, max_held_per_group=1) as q, q.connect() as c:
        assert q.put_many(["g1", "g2"], keys=["a", "b"], group="site") == [True, True]
        assert q.put_many(["new"], keys=["a"], replace=True) == [True]
        assert c.get_nowait() == "new"
        with pytest.raises(ackqueue.Empty):  # the group's one place is taken
            c.get_nowait()


def test_a_replaced_payload_is_what_the_next_get_returns(path) -> None:
    """Without a reopen between them: the pickle of the first put is not served from memory."""
    with ackqueue.AckQueue(path) as q:
        q.put("v1", key="k")
        assert q.put("v2", key="k", replace=True) is True
        assert q.get_nowait() == "v2"


@pytest.mark.parametrize("how", ["by key", "where"])
def test_a_removal_in_a_committed_block_removes_the_item_and_frees_its_key(path, how) -> None:
    with ackqueue.AckQueue(path) as q:
        q.put("gone", key="k", unique="forever")
        q.put("kept", key="j")
        with q.transaction():
            if how == "by key":
                q.remove("k")
            else:
                assert q.remove_where(lambda item: item == "gone") == 1
        assert q.qsize() == 1 and not q.seen("k")
        assert q.put("again", key="k") is True  # free: removed, not done
        assert [q.get_nowait(), q.get_nowait()] == ["kept", "again"]


def test_a_forget_in_a_block_happens_with_the_block_or_not_at_all(path) -> None:
    with ackqueue.AckQueue(path) as q:
        q.put("x", key="k", unique="forever")
        assert q.get_nowait() == "x" and q.seen("k")
        with pytest.raises(RuntimeError), q.transaction():
            assert q.forget("k") is True  # it was remembered (as the block's commit will find)
            raise RuntimeError("the block fails")
        assert q.seen("k")
        with q.transaction():
            assert q.forget("k") is True
        assert not q.seen("k")
        with q.transaction():
            assert q.forget("k") is False


def joins_at_once(q: ackqueue.AckQueue) -> None:
    """``q.join()`` returns: no item is counted unfinished (a removed one is done)."""
    joined = threading.Thread(target=q.join)
    joined.start()
    joined.join(5)
    assert not joined.is_alive(), "join() waits for the removed item"


def test_a_removal_makes_room_for_a_waiting_put_and_counts_its_item_done(path) -> None:
    with ackqueue.AckQueue(path, maxsize=1) as q:
        q.put("a", key="a")
        waiting = threading.Thread(target=lambda: q.put("b", key="b", timeout=10))
        waiting.start()
        time.sleep(0.1)
        assert waiting.is_alive()  # no room yet
        q.remove("a")
        waiting.join(5)
        assert not waiting.is_alive()
        assert q.get_nowait() == "b"
        q.task_done()
        joins_at_once(q)


def test_a_removal_in_a_committed_block_counts_the_item_done_and_makes_room(path) -> None:
    with ackqueue.AckQueue(path, maxsize=1) as q:
        q.put("a", key="a")
        with q.transaction():
            q.remove("a")
        q.put("b", key="b", block=False)  # its place is free
        assert q.get_nowait() == "b"
        q.task_done()
        joins_at_once(q)


def test_a_removal_of_two_items_wakes_two_waiting_puts(path) -> None:
    with ackqueue.AckQueue(path, maxsize=2) as q:
        q.put_many(["a", "b"], keys=["a", "b"])
        waiting = [threading.Thread(target=lambda n=n: q.put(n, key=f"w{n}", timeout=10))
                   for n in range(2)]
        for thread in waiting:
            thread.start()
        time.sleep(0.1)
        assert q.remove_where(lambda item: item in ("a", "b")) == 2
        for thread in waiting:
            thread.join(3)
        assert not any(thread.is_alive() for thread in waiting)
        assert sorted([q.get_nowait(), q.get_nowait()]) == [0, 1]


def test_a_failed_block_gives_back_what_its_puts_by_key_took(path) -> None:
    """A put by key in a block that fails: a waiting item it was to make due keeps its time
    (not lost from memory until a reopen), and a new item's place under maxsize is free."""
    clock = ackqueue.ManualClock()
    with ackqueue.AckQueue(path, clock=clock, maxsize=2) as q:
        q.put("waiting", key="k", delay=100)
        with pytest.raises(RuntimeError), q.transaction():
            assert q.put("sooner", key="k") is False  # would make "waiting" due now
            assert q.put("new", key="n") is True
            raise RuntimeError("the block fails")
        assert q.delayed_count() == 1 and q.qsize() == 0
        q.put_many(["x", "y"], block=False)  # both places free
        assert [q.get_nowait(), q.get_nowait()] == ["x", "y"]
        clock.advance(101)
        assert q.get_nowait() == "waiting"


def test_a_key_twice_in_a_batch_with_replace_answers_as_its_first_put(path) -> None:
    """With ``replace=True`` a later put of a key in the same batch revises the first one's
    item; it answered True even when the first was not stored at all (its key seen, or its
    item held), so the caller counted an item that was never stored."""
    with ackqueue.AckQueue(path, unique="forever") as q, q.connect() as c:
        assert q.put("a", key="seen") is True
        c.ack(c.get_nowait())
        assert q.put("h0", key="held") is True
        held = c.get_nowait()
        assert q.put_many(["b1", "b2"], keys=["seen", "seen"], replace=True) == [False, False]
        assert q.put_many(["h1", "h2"], keys=["held", "held"], replace=True) == [False, False]
        assert q.put_many(["n1", "n2"], keys=["new", "new"], replace=True) == [True, True]
        c.ack(held)
        assert q.qsize() == 1 and q.get_nowait() == "n2"
        with q.transaction():
            assert q.put_many(["s1", "s2"], keys=["seen", "seen"], replace=True) == [False] * 2
            assert q.put_many(["m1", "m2"], keys=["more", "more"], replace=True) == [True] * 2
        assert q.qsize() == 1 and q.get_nowait() == "m2"
