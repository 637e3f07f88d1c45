"""Attempts, ``max_attempts``, ``reject`` and the dead-letter store."""

from __future__ import annotations

import time

import pytest
from semantic_helpers import run_child

from ackqueue import AckQueue, Empty, ItemLoadError, NotHeldError, UnloadableItem


def test_attempts_count_deliveries_and_max_attempts_dead_letters_the_item(qpath):
    with AckQueue(qpath, max_attempts=3) as q:
        q.put_many(["flaky", "fine"])
        c = q.connect()
        seen = []
        for _ in range(3):
            item = c.get()
            assert item == "flaky"
            seen.append(c.delivery(item).attempts)
            c.nack(item)  # the third nack sends it to the dead letters
        assert seen == [1, 2, 3]
        assert c.get(timeout=1) == "fine"
        [letter] = q.dead_letters()
        assert (letter.item, letter.attempts) == ("flaky", 3)
        assert "max_attempts" in letter.reason and letter.when > 0 and letter.id >= 1
        assert q.qsize() == 0 and q.dead_count() == 1


def test_attempts_survive_restart_with_max_attempts(qpath):
    with AckQueue(qpath, max_attempts=5) as q:
        q.put("x")
        c = q.connect()
        c.get()  # attempt 1, given back at close
    with AckQueue(qpath, max_attempts=5) as q:
        c = q.connect()
        item = c.get()
        assert c.delivery(item).attempts == 2


def test_without_max_attempts_gets_commit_nothing_and_attempts_count_in_memory(qpath):
    with AckQueue(qpath) as q:
        q.put("x")
        c = q.connect()
        commits = q._store.commits
        for expected in (1, 2, 3):
            item = c.get()
            assert c.delivery(item).attempts == expected
            c.nack(item)
        assert q._store.commits == commits


def test_dead_letter_is_recorded_before_the_process_can_die_on_the_item(qpath):
    code = r"""
import os, signal, sys
from ackqueue import AckQueue, Empty
q = AckQueue(sys.argv[1], max_attempts=3)
c = q.connect()
while True:
    try:
        item = c.get_nowait()
    except Empty:
        break
    if item == "poison":
        print("dying on attempt", c.delivery(item).attempts, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)   # the parser segfaults, say
    print("done", item, flush=True)
    c.ack(item)
print("finished", flush=True)
"""
    with AckQueue(qpath) as q:
        q.put_many(["poison", "ok1", "ok2"])
    deaths = []
    for _ in range(8):
        result = run_child(code, qpath)
        if result.returncode == 0:
            break
        assert result.returncode == -9, result.stderr
        deaths.append(result.stdout.strip())
    assert deaths == [f"dying on attempt {n}" for n in (1, 2, 3)]
    assert result.stdout.split("\n")[:3] == ["done ok1", "done ok2", "finished"]
    with AckQueue(qpath) as q:
        [letter] = q.dead_letters()
        assert (letter.item, letter.attempts) == ("poison", 3)
        assert q.qsize() == 0


def test_reject_sends_straight_to_dead_letters_with_reason(qpath):
    with AckQueue(qpath) as q:
        q.put_many([{"url": "a"}, {"url": "b"}])
        c = q.connect()
        item = c.get()
        c.reject(item, reason="404")
        with pytest.raises(NotHeldError):
            c.ack(item)
        other = c.get()
        c.reject(other)
        assert q.qsize() == 0 and q.unacked_count() == 0
    with AckQueue(qpath) as q:
        letters = q.dead_letters()
        assert [(d.item, d.attempts, d.reason) for d in letters] == [
            ({"url": "a"}, 1, "404"),
            ({"url": "b"}, 1, "rejected"),
        ]
        assert letters[0].when <= letters[1].when


def test_requeue_and_purge_act_on_chosen_or_all_dead_letters(qpath):
    with AckQueue(qpath, max_attempts=2) as q:
        q.put_many(range(5))
        c = q.connect()
        for _ in range(5):
            c.reject(c.get())
        ids = [d.id for d in q.dead_letters()]
        assert q.requeue_dead([ids[1], ids[3], 999]) == 2
        assert q.qsize() == 2
        got = [c.get(), c.get()]
        assert got == [1, 3] and [c.delivery(x).attempts for x in got] == [1, 1]
        c.ack_many(got)
        assert q.purge_dead([ids[0]]) == 1
        assert [d.item for d in q.dead_letters()] == [2, 4]
        q.put("live")
    with AckQueue(qpath, max_attempts=2) as q:
        assert q.requeue_dead() == 2
        c = q.connect()
        assert [c.get(), c.get(), c.get()] == ["live", 2, 4]  # requeued go to the end
        c.close()
        assert q.purge_dead() == 0
        assert q.qsize() == 3 and q.dead_count() == 0


def test_a_record_without_dead_letters_opens_and_gains_them(qpath):
    with AckQueue(qpath) as q:
        q.put("x")
        assert "dead" not in q._book.record.__dict__  # as written before dead letters existed
        assert q.dead_letters() == [] and q.dead_count() == 0
    with AckQueue(qpath) as q, q.connect() as c:
        c.reject(c.get(), reason="old file")
        assert q.dead_count() == 1


def test_unloadable_item_goes_to_dead_letters_and_the_head_moves_on(qpath, vanishing_class):
    module, remove = vanishing_class
    with AckQueue(qpath) as q:
        q.put(module.Gone())
        q.put("after")
        q.put(module.Gone())
        q.put("last")
    remove()
    with AckQueue(qpath) as q:
        c = q.connect()
        with pytest.raises(ItemLoadError, match=rf"{module.__name__}\.Gone.*dead letters"):
            c.get()
        # get_many skips (and buries) one it meets after its first item
        assert c.get_many(5) == ["after", "last"]
        assert q.qsize() == 0
        letters = q.dead_letters()
        assert len(letters) == 2
        assert all(isinstance(d.item, UnloadableItem) for d in letters)
        assert all(f"{module.__name__}.Gone" in d.reason for d in letters)
        with pytest.raises(Empty):
            c.get_nowait()


def test_an_unloadable_item_is_named_by_its_key_and_queue(qpath, vanishing_class):
    # The name is formatted only when loading fails; it still says which entry of which queue.
    module, remove = vanishing_class
    with AckQueue(qpath, name="jobs") as q:
        q.put("first")
        q.put(module.Gone())
    remove()
    with AckQueue(qpath, name="jobs") as q:
        assert q.get_nowait() == "first"
        with pytest.raises(ItemLoadError, match=r"cannot load item 1 of queue 'jobs': "):
            q.get_nowait()
        assert q.dead_count() == 1
        [letter] = q.dead_letters()
        assert letter.reason.startswith("cannot load item 1 of queue 'jobs': ")
        assert abs(letter.when - time.time()) < 600
        assert q.unfinished_tasks == 1  # "first", until its task_done; not the buried one
