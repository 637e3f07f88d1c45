"""A stateful test of groups and snooze: random operations on a real queue file, checked
against a model.

The model keeps, per group, the ready items in put order, the held ones, when the group last
delivered and until when it is paused; a snoozed item waits until its time. It checks every
get: the item is the first ready one of its group, its group may deliver (fewer than
``max_held_per_group`` out, ``group_interval`` passed, not paused), a get finds nothing only
when no group may deliver, and the order is round-robin: while a group may deliver, no other
group delivers twice before it does. The delivery count of an item counts its gets, less its
snoozes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import ackqueue

GROUPS = ["a", "b", "c", None]


@dataclass
class Item:
    seq: int
    group: str | None
    gets: int = 0
    snoozes: int = 0
    due: float = 0.0  # snoozed until


@dataclass
class Model:
    now: float
    cap: int | None
    interval: float
    ready: dict[str | None, list[Item]] = field(default_factory=dict)  # put order
    held: dict[int, tuple[Item, Any]] = field(default_factory=dict)  # seq -> (item, object)
    snoozed: list[Item] = field(default_factory=list)
    last: dict[str | None, float] = field(default_factory=dict)
    paused: dict[str | None, float] = field(default_factory=dict)

    def out(self, group: str | None) -> int:
        return sum(1 for item, _ in self.held.values() if item.group == group)

    def may_deliver(self, group: str | None) -> bool:
        if not self.ready.get(group):
            return False
        if self.cap is not None and self.out(group) >= self.cap:
            return False
        if group in self.last and self.now < self.last[group] + self.interval:
            return False
        return not self.now < self.paused.get(group, 0.0)

    def eligible(self) -> set[str | None]:
        return {g for g in GROUPS if self.may_deliver(g)}

    def make_ready(self, item: Item) -> None:
        lane = self.ready.setdefault(item.group, [])
        lane.append(item)
        lane.sort(key=lambda i: i.seq)

    def fall_due(self) -> None:
        for item in [i for i in self.snoozed if i.due <= self.now]:
            self.snoozed.remove(item)
            self.make_ready(item)


class GroupsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "q.fs")
        self.clock = ackqueue.ManualClock(1_000_000.0)
        self.seq = 0
        self.passed_over: dict[str | None, set[str | None]] = {}

    @initialize(cap=st.sampled_from([None, 1, 2]), interval=st.sampled_from([0.0, 5.0]))
    def open_queue(self, cap: int | None, interval: float) -> None:
        self.model = Model(self.clock(), cap, interval)
        self.open()

    def open(self) -> None:
        self.q = ackqueue.AckQueue(
            self.path,
            clock=self.clock,
            max_attempts=50,
            max_held_per_group=self.model.cap,
            group_interval=self.model.interval,
        )
        self.c = self.q.connect()

    def teardown(self) -> None:
        if hasattr(self, "q"):
            self.q.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- rules -------------------------------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), n=st.integers(1, 3))
    def put(self, group: str | None, n: int) -> None:
        for _ in range(n):
            self.seq += 1
            self.q.put(self.seq, group=group)
            self.model.make_ready(Item(self.seq, group))
        self._eligibility_changed()

    @rule()
    def get(self) -> None:
        m = self.model
        eligible = m.eligible()
        try:
            obj = self.c.get(block=False)
        except ackqueue.Empty:
            assert not eligible, f"nothing delivered while {eligible} may deliver"
            return
        assert isinstance(obj, int)
        group = next(g for g, lane in m.ready.items() if any(i.seq == obj for i in lane))
        assert group in eligible, f"{obj} of group {group!r} delivered; may: {eligible}"
        lane = m.ready[group]
        assert lane[0].seq == obj, f"{obj} delivered before {lane[0].seq} of group {group!r}"
        for waiting, passed in self.passed_over.items():
            if waiting != group and waiting in eligible:
                assert group not in passed, f"{group!r} delivered twice while {waiting!r} waited"
        item = lane.pop(0)
        item.gets += 1
        m.held[item.seq] = (item, obj)
        if m.interval:
            m.last[group] = m.now
        assert self.c.delivery(obj).attempts == item.gets - item.snoozes
        self.passed_over[group] = set()
        for waiting in eligible - {group}:
            self.passed_over.setdefault(waiting, set()).add(group)
        self._eligibility_changed()

    @rule(n=st.integers(2, 5))
    def get_several(self, n: int) -> None:
        for _ in range(n):
            self.get()

    @precondition(lambda self: self.model.held)
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "snooze 0", "snooze 3"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        m = self.model
        seq = data.draw(st.sampled_from(sorted(m.held)))
        item, obj = m.held.pop(seq)
        if how == "ack":
            self.c.ack(obj)
        elif how == "nack":
            self.c.nack(obj)
            m.make_ready(item)
        else:
            seconds = float(how.split()[1])
            self.c.snooze(obj, seconds)
            item.snoozes += 1
            item.due = m.now + seconds
            m.snoozed.append(item)
            m.fall_due()
        self._eligibility_changed()

    @rule(seconds=st.sampled_from([1.0, 5.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.model.now = self.clock()
        self.model.fall_due()
        self._eligibility_changed()

    @rule(group=st.sampled_from(["a", "b"]), seconds=st.sampled_from([0.0, 4.0]))
    def pause_group(self, group: str, seconds: float) -> None:
        self.q.pause_group(group, seconds)
        self.model.paused[group] = self.model.now + seconds
        self._eligibility_changed()

    @rule(group=st.sampled_from(["a", "c"]))
    def remove_group(self, group: str) -> None:
        m = self.model
        waiting = len(m.ready.pop(group, [])) + sum(1 for i in m.snoozed if i.group == group)
        m.snoozed = [i for i in m.snoozed if i.group != group]
        assert self.q.remove_group(group) == waiting
        self._eligibility_changed()

    @rule()
    def snooze_of_an_item_not_held_changes_nothing(self) -> None:
        with pytest.raises(ackqueue.NotHeldError):
            self.c.snooze(object(), 1.0)

    @rule()
    def reopen(self) -> None:
        """Holds come back in place; intervals are kept in memory only, pauses are stored."""
        self.q.close()
        m = self.model
        for item, _obj in m.held.values():
            m.make_ready(item)
        m.held.clear()
        m.last.clear()
        self.passed_over.clear()
        self.open()

    # -- invariants --------------------------------------------------------------------------

    def _eligibility_changed(self) -> None:
        eligible = self.model.eligible()
        for waiting in list(self.passed_over):
            if waiting not in eligible:
                del self.passed_over[waiting]  # its turn restarts once it may deliver again

    @invariant()
    def counts_agree(self) -> None:
        if not hasattr(self, "q"):
            return
        m = self.model
        assert self.q.unacked_count() == len(m.held)
        assert self.q.delayed_count() == len(m.snoozed)
        ready_now = sum(len(m.ready[g]) for g in m.eligible())
        assert self.q.qsize() == ready_now


GroupsMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("ACKQUEUE_MODEL_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_groups_against_the_model = GroupsMachine.TestCase
