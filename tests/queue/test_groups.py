"""Groups in one process: round-robin, limits, snooze, pause and remove, bad input, threads."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter

import pytest
from polling import bounded, wait_until

import ackqueue
from ackqueue import AckQueue, Empty, LifoAckQueue, ManualClock, NotHeldError, PriorityAckQueue


def drain_held(c: ackqueue.Consumer) -> list[object]:
    got = []
    for _ in bounded(1_000_000, "draining the queue"):
        try:
            got.append(c.get(block=False))
        except Empty:
            return got


def test_gets_go_round_robin_across_groups_fifo_within_each(qpath: str) -> None:
    with AckQueue(qpath) as q:
        q.put_many([f"a{i}" for i in range(4)], group="a")
        q.put("b0", group="b")
        q.put("n0")  # no group: a group of its own
        q.put("b1", group="b")
        q.put("n1")
        with q.connect() as c:
            assert drain_held(c) == ["a0", "b0", "n0", "a1", "b1", "n1", "a2", "a3"]


def test_the_group_is_stored_and_survives_a_restart(qpath: str) -> None:
    with AckQueue(qpath) as q:
        q.put_many(["a0", "a1", "a2"], group="a")
        q.put_many(["b0", "b1"], group="b")
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        assert drain_held(c) == ["a0", "b0"]  # one held per group, the rest waits
        assert q.qsize() == 0 and q.unacked_count() == 2


def test_a_grouped_put_on_a_queue_opened_without_groups_keeps_the_backlog(qpath: str) -> None:
    with AckQueue(qpath) as q:
        q.put_many(["old0", "old1", "old2"])
    with AckQueue(qpath) as q, q.connect() as c:
        assert c.get() == "old0"
        q.put("g0", group="g")
        assert drain_held(c) == ["old1", "g0", "old2"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (LifoAckQueue, ["a2", "b0", "a0", "b1", "a1"]),  # the last put of each group first
        (PriorityAckQueue, ["a0", "b0", "a1", "b1", "a2"]),
    ],
)
def test_within_a_group_the_queue_kind_orders(qpath: str, kind: type, expected: list[str]) -> None:
    with kind(qpath) as q, q.connect() as c:
        for item in ["a1", "a0", "a2"]:
            q.put(item, group="a")
        for item in ["b1", "b0"]:
            q.put(item, group="b")
        assert drain_held(c) == expected


def test_max_held_per_group_caps_the_items_out_until_one_is_settled(qpath: str) -> None:
    with AckQueue(qpath, max_held_per_group=2) as q, q.connect() as c:
        q.put_many(range(5), group="a")
        q.put("b", group="b")
        got = drain_held(c)
        assert got == [0, "b", 1]
        c.ack(0)
        assert c.get(timeout=5) == 2
        c.nack(1)  # back in its place, and the group may deliver again
        assert c.get(timeout=5) == 1


def test_an_item_taken_for_good_or_delayed_is_out_of_its_group_no_longer(qpath: str) -> None:
    # A plain get removes the item; a delayed nack or a snooze puts it off: none of them is
    # held any more, so none of them keeps its group at the cap.
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        q.put_many(["a", "b", "c", "d"], group="g")
        assert q.get_nowait() == "a"
        b = c.get_nowait()
        c.nack(b, delay=3600)
        c_ = c.get_nowait()
        c.snooze(c_, 3600)
        assert (b, c_, c.get_nowait()) == ("b", "c", "d")


def test_group_interval_spaces_deliveries_of_one_group() -> None:
    clock = ManualClock(1000.0)
    with AckQueue(None, clock=clock, group_interval=10) as q, q.connect() as c:
        q.put_many(["a0", "a1"], group="a")
        q.put_many(["b0"], group="b")
        assert drain_held(c) == ["a0", "b0"]
        clock.advance(9.5)
        assert drain_held(c) == []
        clock.advance(0.5)
        assert drain_held(c) == ["a1"]


def test_set_group_changes_only_what_it_names_and_a_bare_one_gives_the_queues_back() -> None:
    """``set_group(g, max_held=n)`` leaves ``g``'s interval the queue's ``group_interval``
    (None is the queue's option, not 0); ``set_group(g)`` gives ``g`` the queue's options
    back; a bad interval is refused naming it."""
    clock = ManualClock(1000.0)
    with AckQueue(None, clock=clock, group_interval=10) as q, q.connect() as c:
        q.set_group("a", max_held=5)
        q.put_many(["a0", "a1"], group="a")
        assert drain_held(c) == ["a0"]  # still 10 s apart
        clock.advance(10)
        assert drain_held(c) == ["a1"]
        q.set_group("a", interval=0)
        q.put_many(["a2", "a3"], group="a")
        assert drain_held(c) == ["a2", "a3"]
        q.set_group("a")  # the queue's options again: 10 s apart (from a3's delivery)
        q.put_many(["a4", "a5"], group="a")
        assert drain_held(c) == []
        clock.advance(10)
        assert drain_held(c) == ["a4"]
        with pytest.raises(ValueError, match="interval must be a finite number of seconds"):
            q.set_group("a", interval=-1)


def test_a_get_waiting_for_a_group_wakes_when_its_interval_ends() -> None:
    with AckQueue(None, group_interval=0.2) as q, q.connect() as c:
        q.put_many(["a0", "a1"], group="a")
        assert c.get() == "a0"
        started = time.monotonic()
        assert c.get(timeout=10) == "a1"
        assert time.monotonic() - started >= 0.15


def test_snooze_puts_an_item_back_for_later_without_spending_an_attempt(qpath: str) -> None:
    clock = ManualClock(1000.0)
    with AckQueue(qpath, clock=clock, max_attempts=1) as q, q.connect() as c:
        q.put("job", group="h")
        item = c.get()
        c.snooze(item, 30)
        assert q.qsize() == 0 and q.delayed_count() == 1
        clock.advance(30)
        again = c.get(block=False)
        assert c.delivery(again).attempts == 1  # with max_attempts=1 it was not buried
        c.ack(again)
        assert q.dead_count() == 0


def test_snooze_is_stored(qpath: str) -> None:
    with AckQueue(qpath) as q, q.connect() as c:
        q.put("job")
        c.snooze(c.get(), 3600)
    with AckQueue(qpath) as q:
        assert q.qsize() == 0 and q.delayed_count() == 1


def test_snooze_of_what_is_not_held_or_negative_is_refused_and_changes_nothing(
    qpath: str,
) -> None:
    with AckQueue(qpath) as q, q.connect() as c, q.connect() as other:
        q.put("job")
        item = c.get()
        with pytest.raises(NotHeldError, match="held by another consumer"):
            other.snooze(item, 1)
        with pytest.raises(NotHeldError):
            c.snooze("job", 1)  # not the very object get() returned
        with pytest.raises(ValueError, match="snooze seconds"):
            c.snooze(item, -1)
        with pytest.raises(TypeError, match="snooze seconds"):
            c.snooze(item, "soon")  # type: ignore[arg-type]
        assert c.deliveries()[0].item is item and q.delayed_count() == 0
        c.ack(item)


@pytest.mark.parametrize("group", [b"host", 3, ("a",), object()])
def test_a_group_that_is_not_a_str_is_refused_and_nothing_stored(qpath: str, group: object) -> None:
    with AckQueue(qpath) as q:
        with pytest.raises(TypeError, match="group must be a str"):
            q.put("x", group=group)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="group must be a str"):
            q.put_many(["x", "y"], group=group)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="name the group"):
            q.pause_group(group, 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="name the group"):
            q.remove_group(group)  # type: ignore[arg-type]
        assert q.qsize() == 0
    with AckQueue(qpath) as q:
        assert q.qsize() == 0


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_held_per_group": 0}, ValueError),
        ({"max_held_per_group": -1}, ValueError),
        ({"max_held_per_group": 1.5}, TypeError),
        ({"group_interval": -0.1}, ValueError),
        ({"group_interval": float("nan")}, ValueError),
        ({"group_interval": "1"}, TypeError),
    ],
)
def test_bad_group_options_are_refused_before_the_file_is_made(
    qpath: str, options: dict[str, object], error: type
) -> None:
    with pytest.raises(error, match="max_held_per_group|group_interval"):
        AckQueue(qpath, **options)  # type: ignore[arg-type]
    assert not os.path.exists(qpath)


def test_a_negative_pause_is_refused_and_nothing_stored(qpath: str) -> None:
    with AckQueue(qpath) as q:
        with pytest.raises(ValueError, match="pause_group seconds"):
            q.pause_group("a", -5)
        q.put("a0", group="a")
        assert q.qsize() == 1


def test_a_paused_group_waits_and_the_pause_is_stored(qpath: str) -> None:
    clock = ManualClock(1000.0)
    with AckQueue(qpath, clock=clock) as q, q.connect() as c:
        q.put_many(["a0", "a1"], group="a")
        q.put("b0", group="b")
        q.pause_group("a", 60)
        assert drain_held(c) == ["b0"]
    with AckQueue(qpath, clock=clock) as q, q.connect() as c:
        assert drain_held(c) == ["b0"]  # given back at close; "a" is still paused
        clock.advance(60)
        assert drain_held(c) == ["a0", "a1"]


def test_resume_group_wakes_a_waiting_get(qpath: str) -> None:
    with AckQueue(qpath) as q, q.connect() as c:
        q.put("a0", group="a")
        q.pause_group("a", 3600)
        got: list[object] = []
        getter = threading.Thread(target=lambda: got.append(c.get(timeout=30)))
        getter.start()
        wait_until(lambda: q.qsize() == 0)
        q.pause_group("a", 0)
        getter.join(30)
        assert got == ["a0"]


def test_remove_group_removes_waiting_items_and_leaves_held_ones_held(qpath: str) -> None:
    clock = ManualClock(1000.0)
    with AckQueue(qpath, clock=clock) as q, q.connect() as c:
        q.put_many(["a0", "a1", "a2"], group="a")
        q.put("a-later", group="a", delay=60)
        q.put("b0", group="b")
        held = c.get()
        assert held == "a0"
        assert q.remove_group("a") == 3
        assert q.unfinished_tasks == 2  # join() waits for "a0" (held) and "b0" only
        assert q.remove_group("a") == 0
        assert q.remove_group("nobody") == 0
        c.ack(held)  # its ack works as usual
        clock.advance(60)
        assert drain_held(c) == ["b0"]  # "a-later" was removed too
    with AckQueue(qpath) as q:
        assert q.qsize() == 1 and q.delayed_count() == 0  # b0, given back at close


def test_join_counts_items_of_groups_that_may_not_deliver(qpath: str) -> None:
    with AckQueue(qpath, max_held_per_group=1) as q:
        q.put_many(["a0", "a1"], group="a")
        q.put("b0", group="b")
        q.pause_group("b", 3600)
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        assert q.unfinished_tasks == 3
        assert q.qsize() == 2  # what may be delivered now: "b" is paused
        c.get()
        assert q.qsize() == 0  # "a" is at its cap
        q.shutdown(immediate=True)
        assert q.unfinished_tasks == 0  # join() counted the items of waiting groups too


def test_many_threads_never_hold_two_of_a_group_and_keep_the_interval(qpath: str) -> None:
    """max_held_per_group=1, checked by the workers themselves while they run, and the
    spacing of group_interval from each get's own start and end."""
    groups, per_group, interval = 6, 8, 0.05
    with AckQueue(qpath, max_held_per_group=1, group_interval=interval) as q:
        for g in range(groups):
            q.put_many([(f"g{g}", i) for i in range(per_group)], group=f"g{g}")
        lock = threading.Lock()
        out: Counter[str] = Counter()
        most_out: Counter[str] = Counter()
        windows: dict[str, list[tuple[float, float]]] = {}
        errors: list[BaseException] = []

        def work() -> None:
            try:
                with q.connect() as c:
                    for _ in bounded(100_000, "a worker's gets"):
                        before = time.monotonic()
                        try:
                            item = c.get(timeout=1.0)
                        except Empty:
                            return
                        group = item[0]
                        after = time.monotonic()
                        with lock:
                            out[group] += 1
                            most_out[group] = max(most_out[group], out[group])
                            windows.setdefault(group, []).append((before, after))
                        time.sleep(0.001)  # some work while it is held
                        with lock:
                            out[group] -= 1
                        c.ack(item)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        assert set(most_out.values()) == {1}, most_out
        assert sum(len(w) for w in windows.values()) == groups * per_group
        for group, spans in windows.items():
            for n, (b1, a1) in enumerate(spans):
                for b2, a2 in spans[n + 1 :]:
                    # Each delivery happened inside its get's window: two windows that both
                    # fit in less than the interval prove two deliveries closer than that.
                    assert max(a1, a2) - min(b1, b2) >= interval, group


def test_a_requeued_dead_letter_keeps_its_group(qpath: str) -> None:
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        q.put_many(["a0", "a1"], group="a")
        c.reject(c.get(), "bad")
        assert q.requeue_dead() == 1
        assert drain_held(c) == ["a1"]  # "a0" is back in group "a", which is at its cap
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        assert len(drain_held(c)) == 1  # and it is stored in that group


def test_grouped_puts_in_a_transaction_land_in_their_groups(qpath: str) -> None:
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        with q.transaction():
            q.put("a0", group="a")
            q.put_many(["b0", "b1"], group="b")
            q.put("a1", group="a")
        assert drain_held(c) == ["a0", "b0"]


def test_get_many_respects_the_cap_of_each_group(qpath: str) -> None:
    with AckQueue(qpath, max_held_per_group=2) as q, q.connect() as c:
        q.put_many(range(10), group="a")
        q.put_many(["b0", "b1", "b2"], group="b")
        got = c.get_many(10)
        assert got == [0, "b0", 1, "b1"]


def test_an_item_given_back_by_a_closed_consumer_frees_its_groups_place(qpath: str) -> None:
    """Closing a consumer gives back what it held without settling it: the item is ready
    again and out no longer, so its group, at ``max_held_per_group``, delivers again."""
    with AckQueue(qpath, max_held_per_group=1) as q:
        q.put_many(["a0", "a1"], group="a")
        with q.connect() as first:
            assert first.get_nowait() == "a0"
        with q.connect() as second:
            again = second.get_nowait()
            assert again == "a0"
            second.ack(again)
            assert second.get_nowait() == "a1"


def test_a_paused_group_delivers_again_once_its_pause_runs_out() -> None:
    clock = ManualClock(1000.0)
    with AckQueue(None, clock=clock) as q, q.connect() as c:
        q.put("a0", group="a")
        q.pause_group("a", 60)
        assert drain_held(c) == []
        clock.advance(60)  # no resume: the pause ends by itself
        assert drain_held(c) == ["a0"]


def test_the_interval_of_items_without_a_group_outlasts_another_groups_interval() -> None:
    """Each group's interval runs on its own clock: group "a"'s interval ending must not end
    the interval of the items put without a group, which began later."""
    clock = ManualClock(1000.0)
    with AckQueue(None, clock=clock, group_interval=10) as q, q.connect() as c:
        q.put_many(["a0", "a1"], group="a")
        assert drain_held(c) == ["a0"]
        clock.advance(5)
        q.put_many(["n0", "n1"])
        assert drain_held(c) == ["n0"]
        clock.advance(5)  # "a" may deliver again; the ungrouped items wait until 1015
        q.put("n2")
        assert drain_held(c) == ["a1"]
        clock.advance(5)
        assert drain_held(c) == ["n1"]


def test_groups_whose_intervals_end_at_once_both_deliver_again() -> None:
    clock = ManualClock(1000.0)
    with AckQueue(None, clock=clock, group_interval=10) as q, q.connect() as c:
        q.put_many(["n0", "n1"])
        q.put_many(["a0", "a1"], group="a")
        assert drain_held(c) == ["n0", "a0"]
        clock.advance(10)
        assert drain_held(c) == ["n1", "a1"]


def test_maxsize_frees_the_place_of_a_grouped_item_removed_by_key(qpath: str) -> None:
    with AckQueue(qpath, maxsize=3) as q:
        for n in range(3):
            q.put(f"a{n}", key=f"a{n}", group="a")
        q.remove("a1")
        q.put_nowait("b0", group="b")
        with pytest.raises(ackqueue.Full):
            q.put_nowait("b1", group="b")


def test_maxsize_frees_the_places_of_a_removed_group_and_only_those(qpath: str) -> None:
    with AckQueue(qpath, maxsize=3) as q:
        q.put_many(["a0", "a1"], group="a")
        q.put("b0", group="b")
        assert q.remove_group("a") == 2
        q.put_nowait("c0", group="c")
        q.put_nowait("c1", group="c")
        with pytest.raises(ackqueue.Full):
            q.put_nowait("c2", group="c")


def test_a_long_ungrouped_backlog_beside_a_group_is_delivered_once_and_in_order(
    qpath: str,
) -> None:
    """At open the items without a group stay in a lazy backlog, read a page at a time
    (more than one here) past the grouped entries; each page goes on after the last."""
    with AckQueue(qpath) as q:
        q.put("a0", group="a")
        q.put_many(range(150))
    with AckQueue(qpath) as q, q.connect() as c:
        assert drain_held(c) == [0, "a0", *range(1, 150)]


def test_an_immediate_shutdown_leaves_nothing_ready_in_any_group(qpath: str) -> None:
    with AckQueue(qpath, max_held_per_group=1) as q, q.connect() as c:
        q.put_many(["a0", "a1"], group="a")
        q.put("n0")
        assert c.get_nowait() == "a0"
        q.shutdown(immediate=True)
        assert q.qsize() == 0 and q.empty()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_held_per_group": 1.5}, TypeError,
         "max_held_per_group must be a positive int or None, not float 1.5"),
        ({"max_held_per_group": 0}, ValueError,
         "max_held_per_group must be at least 1 (or None for no cap), not 0"),
        ({"group_interval": "1"}, TypeError,
         "group_interval must be a number of seconds, not str '1'"),
        ({"group_interval": -1}, ValueError,
         "group_interval must be a finite number of seconds >= 0, not -1"),
    ],
)
def test_bad_group_options_are_refused_with_a_message_naming_what_was_given(
    qpath: str, options: dict[str, object], error: type, message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        AckQueue(qpath, **options)  # type: ignore[arg-type]


def test_a_bad_group_name_is_refused_with_a_message_naming_what_was_given(qpath: str) -> None:
    with AckQueue(qpath) as q:
        with pytest.raises(TypeError, match="^" + re.escape(
            "group must be a str (a host name, say) or None, not int 3; convert it with str() "
            "if that is what you mean") + "$"):
            q.put("x", group=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="^" + re.escape(
            "name the group as the str given to put(group=), not bytes b'a'") + "$"):
            q.pause_group(b"a", 1)  # type: ignore[arg-type]
