"""The grouped ready index on its own: lanes, the rotation, and what ``len`` counts."""

from __future__ import annotations

from collections.abc import Callable

from ackqueue import ManualClock
from ackqueue.delivery.groups import GroupedReadyIndex, GroupRules
from ackqueue.delivery.ready import ReadyIndex

Scheduled = list[tuple[float, Callable[[], bool]]]
NO_RULES = GroupRules()


def make(rules: GroupRules = NO_RULES) -> tuple[GroupedReadyIndex, Scheduled]:
    scheduled: Scheduled = []
    index = GroupedReadyIndex(
        ReadyIndex(0, lambda cursor: []),
        rules,
        clock=ManualClock(100.0),  # both the wall clock and the one durations run on
        key_id=lambda key: key,
        schedule=lambda when, wake: scheduled.append((when, wake)),
    )
    return index, scheduled


def put(index: GroupedReadyIndex, key: int, group: str | None) -> None:
    index.assign(key, group)
    index.offer(key)


def test_discard_takes_one_ready_key_out_and_keeps_the_counts() -> None:
    index, _ = make()
    for key, group in [(1, "a"), (2, "a"), (3, "b"), (4, None)]:
        put(index, key, group)
    assert len(index) == index.total() == 4
    assert index.discard(2) and not index.discard(2) and not index.discard(99)
    assert index.discard(3)  # the last of "b": "b" leaves the rotation
    assert len(index) == index.total() == 2
    assert [index.pop(), index.pop()] == [1, 4]
    assert len(index) == 0


def test_a_group_at_its_cap_waits_until_a_key_is_released() -> None:
    index, _ = make(GroupRules(max_held=1))
    for key in (1, 2):
        put(index, key, "a")
    assert index.pop() == 1
    assert len(index) == 0 and index.total() == 1
    assert index.release(1)  # settled: "a" may deliver again
    assert index.pop() == 2


def test_an_interval_schedules_the_group_back() -> None:
    index, scheduled = make(GroupRules(interval=5.0))
    for key in (1, 2):
        put(index, key, "a")
    assert index.pop() == 1
    assert len(index) == 0
    assert [when for when, _ in scheduled] == [105.0]
