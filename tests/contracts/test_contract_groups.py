"""Groups and snooze, the same on every implementation: ``max_held_per_group`` caps what one
group has out, a paused group delivers nothing until resumed, ``remove_group`` takes the
waiting items and leaves the held ones, and ``snooze`` gives an item back for later without
spending an attempt.

Shared mode does not rotate between groups (docs/howto/crawler.rst): a get takes the first stored
item whose group may deliver now, so the tests check only what both modes promise.
"""

from __future__ import annotations

import time

import pytest
from conftest import drain
from contracts.implementations import GIVE_BACK_TIMEOUT

import ackqueue


def test_max_held_per_group_caps_what_one_group_has_out(queues) -> None:
    q = queues(max_held_per_group=1)
    q.put_many(["a1", "a2"], group="a")
    q.put("b1", group="b")
    with q.connect() as c:
        a1, b1 = c.get_nowait(), c.get_nowait()
        assert (a1, b1) == ("a1", "b1")  # a2 waits: a1 is out
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        c.ack(a1)
        a2 = c.get(timeout=GIVE_BACK_TIMEOUT)
        assert a2 == "a2"
        c.ack_many([a2, b1])


def test_items_put_without_a_group_are_one_group_under_the_same_rules(queues) -> None:
    """docs/howto/crawler.rst: items put without a group form one group of their own. Shared
    mode let them all out whatever the cap (a review: 5 held at once with a cap of 1)."""
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(max_held_per_group=1, group_interval=60, clock=clock)
    q.put_many(["u1", "u2", "u3"])
    q.put("g1", group="g")
    with q.connect() as c:
        got = drain(c)
        assert sorted(got) == ["g1", "u1"]  # one of the ungrouped: the cap
        c.ack_many(got)
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()  # nothing out, but the interval runs
        clock.advance(61)
        got = [c.get(timeout=GIVE_BACK_TIMEOUT)]
        assert got == ["u2"]
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        c.ack_many(got)


def test_a_paused_group_delivers_nothing_until_it_is_resumed(queues) -> None:
    q = queues()
    q.put("a1", group="a")
    q.put("b1", group="b")
    q.pause_group("a", 3600)
    with q.connect() as c:
        got = drain(c)
        assert got == ["b1"]
        q.pause_group("a", 0)
        got.append(c.get(timeout=GIVE_BACK_TIMEOUT))
        assert got == ["b1", "a1"]
        c.ack_many(got)


def test_remove_group_takes_the_waiting_items_and_leaves_the_held_ones(queues) -> None:
    q = queues()
    q.put_many(["a1", "a2", "a3"], group="a")
    q.put("b1", group="b")
    with q.connect() as c:
        held = c.get_nowait()
        assert held == "a1"
        assert q.remove_group("a") == 2
        c.ack(held)
    assert drain(q) == ["b1"]


def test_snooze_gives_the_item_back_for_later_without_spending_an_attempt(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(max_attempts=1, clock=clock)
    q.put("rate limited")
    with q.connect() as c:
        item = c.get_nowait()
        c.snooze(item, 30)
        with pytest.raises(ackqueue.NotHeldError):
            c.snooze(item, 30)  # no longer held
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        assert q.delayed_count() == 1
        clock.advance(31)
        again = c.get(timeout=GIVE_BACK_TIMEOUT)  # with max_attempts=1: not a dead letter
        assert again == "rate limited"
        assert c.delivery(again).attempts == 1
        c.ack(again)
    assert q.dead_count() == 0


def test_set_group_changes_one_groups_cap_while_the_queue_runs(queues) -> None:
    q = queues(max_held_per_group=1)
    q.put_many(["a1", "a2", "a3"], group="a")
    q.put_many(["b1", "b2"], group="b")
    with q.connect() as c:
        got = drain(c)
        assert sorted(got) == ["a1", "b1"]  # one of each group out
        q.set_group("a", max_held=3)  # only "a" may have more out now
        more = [c.get(timeout=GIVE_BACK_TIMEOUT), c.get(timeout=GIVE_BACK_TIMEOUT)]
        assert sorted(more) == ["a2", "a3"]
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()  # "b" is still at the queue's cap
        q.set_group("a", max_held=1)
        c.ack_many(got + more)
    q.set_group("b")  # back to the queue's options
    assert drain(q) == ["b2"]


def test_set_group_interval_spaces_one_group_and_not_the_others(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock)
    q.put_many(["a1", "a2"], group="a")
    q.put_many(["b1", "b2"], group="b")
    q.set_group("a", interval=60)
    with q.connect() as c:
        got = drain(c)
        assert sorted(got) == ["a1", "b1", "b2"]  # a2 waits for a's interval
        clock.advance(61)
        got.append(c.get(timeout=GIVE_BACK_TIMEOUT))
        assert got[-1] == "a2"
        c.ack_many(got)


def test_an_interval_lengthened_after_it_ran_out_spaces_the_next_delivery(queues) -> None:
    """The interval is measured from the group's last delivery, whenever it is changed: one
    process forgot that delivery once the interval had run out, so lengthening it then let
    the next item go at once (shared mode measured from the stored last delivery)."""
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock)
    q.put_many(["a1", "a2"], group="a")
    q.set_group("a", interval=60)
    with q.connect() as c:
        got = drain(c)
        assert got == ["a1"]
        clock.advance(61)  # a2 may go now...
        time.sleep(0.1)  # (a watcher or a timer may look at the group meanwhile)
        q.set_group("a", interval=600)  # ...until the interval grows: 600 s after a1
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        clock.advance(540)
        got.append(c.get(timeout=GIVE_BACK_TIMEOUT))
        assert got == ["a1", "a2"]
        c.ack_many(got)


def test_set_group_is_stored_and_holds_after_a_reopen(queues) -> None:
    if not queues.reopens:
        pytest.skip("an in-memory queue keeps nothing once closed")
    q = queues(name="groups")
    q.set_group("a", max_held=1)
    q.put_many(["a1", "a2"], group="a")
    q.close()
    q = queues(name="groups")
    with q.connect() as c:
        got = drain(c)
        assert got == ["a1"]  # the group's own cap, read back from the store
        q.set_group("a")
        c.ack_many(got)
    assert drain(q) == ["a2"]


def test_set_group_refuses_bad_settings_and_stores_nothing(queues) -> None:
    q = queues()
    with pytest.raises(TypeError):
        q.set_group(5, max_held=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        q.set_group("a", max_held=0)
    with pytest.raises(ValueError):
        q.set_group("a", interval=-1)
    q.put_many(["a1", "a2"], group="a")
    with q.connect() as c:
        got = drain(c)
        assert got == ["a1", "a2"]
        c.ack_many(got)


def test_nack_with_replace_gives_back_the_new_item_in_one_step(queues) -> None:
    q = queues(unique="forever")
    q.put({"url": "/a", "retries": 0}, key="/a")
    q.put("later")
    with q.connect() as c:
        first = c.get_nowait()
        c.nack(first, replace={"url": "/a", "retries": 1})
        again = c.get(timeout=GIVE_BACK_TIMEOUT)
        assert again == {"url": "/a", "retries": 1}  # in its place, before "later"
        assert c.delivery(again).attempts == 2
        assert q.put("dup", key="/a") is False  # the key stayed with it
        c.ack(again)
    assert drain(q) == ["later"]
    assert q.seen("/a")


def test_nack_with_replace_and_delay_keeps_the_key_and_waits(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock)
    q.put("v1", key="k")
    with q.connect() as c:
        c.nack(c.get_nowait(), delay=30, replace=None)
        with pytest.raises(ackqueue.Empty):
            c.get_nowait()
        assert q.put("dup", key="k") is False
        clock.advance(31)
        again = c.get(timeout=GIVE_BACK_TIMEOUT)
        assert again is None  # None is an item like any other
        c.ack(again)


def test_nack_with_an_unpicklable_replacement_changes_nothing(queues) -> None:
    q = queues()
    q.put("v1")
    with q.connect() as c:
        item = c.get_nowait()
        with pytest.raises(ackqueue.UnpicklableItemError):
            c.nack(item, replace=lambda: None)
        c.nack(item)  # still held, as it was
        assert c.get(timeout=GIVE_BACK_TIMEOUT) == "v1"


def test_stored_count_counts_ready_delayed_and_held_items(queues) -> None:
    clock = ackqueue.ManualClock(1_000_000.0)
    q = queues(clock=clock)
    q.put_many(["a", "b"])
    q.put("later", delay=60)
    with q.connect() as c:
        held = c.get_nowait()
        assert q.stored_count() == 3
        c.ack(held)
    assert q.stored_count() == 2
