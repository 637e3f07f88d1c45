"""A stateful test: random operations on a real queue file, checked against a model.

The model is the contract in a few lines: a ready list in delivery order and, per consumer,
what it holds in delivery order. Gets take the head of the ready list; an ack removes a hold;
a nack, a consumer close, a dropped consumer or a reopen of the queue put holds back in their
original place. Acking what is not held raises NotHeldError and changes nothing.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from polling import bounded

import ackqueue


class Job:
    """A user class with value equality, as a caller's job object would have."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return type(other) is Job and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Job", self.n))

    def __repr__(self) -> str:
        return f"Job({self.n})"


any_items = st.one_of(
    st.integers(0, 3),  # duplicates, and small ints are one shared object
    st.integers(),
    st.text(max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(0, 9), max_size=2),
    st.builds(Job, st.integers(0, 3)),
)


@dataclass
class ModelHold:
    seq: int
    value: Any
    obj: Any  # the very object the consumer got
    delivery_id: int


def same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class QueueMachine(RuleBasedStateMachine):
    queue_class: type[ackqueue.AckQueue] = ackqueue.AckQueue

    @staticmethod
    def order(seq: int, value: Any) -> Any:
        return seq

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ackqueue-model-")
        self.path = os.path.join(self.dir, "q.fs")
        self.q = self.queue_class(self.path)
        self.next_seq = 0
        self.ready: list[tuple[int, Any]] = []
        self.consumers: list[Any] = []
        self.held: list[list[ModelHold]] = []
        self.settled_ids: list[tuple[int, int]] = []  # (consumer index, delivery id)
        self.closed_consumers: list[Any] = []

    # -- model helpers -----------------------------------------------------------------------

    def make_ready(self, seq: int, value: Any) -> None:
        self.ready.append((seq, value))
        self.ready.sort(key=lambda sv: self.order(*sv))

    def pop_head(self) -> tuple[int, Any]:
        return self.ready.pop(0)

    def consumer(self, pick: int) -> int:
        return pick % len(self.consumers)

    def held_somewhere(self) -> bool:
        return any(self.held)

    def give_back_all(self, ci: int) -> None:
        for hold in self.held[ci]:
            self.make_ready(hold.seq, hold.value)
        self.held[ci] = []

    def retire_consumer(self, ci: int) -> None:
        self.closed_consumers.append(self.consumers[ci])
        del self.consumers[ci]
        del self.held[ci]
        self.settled_ids = [(i - (i > ci), d) for i, d in self.settled_ids if i != ci]

    def snapshot(self) -> tuple[int, int, list[list[int]]]:
        return (
            self.q.qsize(),
            self.q.unacked_count(),
            [[d.id for d in c.deliveries()] for c in self.consumers],
        )

    # -- rules -------------------------------------------------------------------------------

    @rule(value=any_items)
    def put(self, value: Any) -> None:
        self.q.put(value)
        self.make_ready(self.next_seq, value)
        self.next_seq += 1

    @rule(value=st.integers(0, 3), times=st.integers(2, 3))
    def put_equal_items(self, value: int, times: int) -> None:
        for _ in range(times):
            self.put(value)

    @rule()
    def plain_get(self) -> None:
        if not self.ready:
            with pytest.raises(ackqueue.Empty):
                self.q.get_nowait()
            return
        _, value = self.pop_head()
        assert same(self.q.get_nowait(), value)

    @precondition(lambda self: len(self.consumers) < 3)
    @rule()
    def connect(self) -> None:
        self.consumers.append(self.q.connect())
        self.held.append([])

    @precondition(lambda self: self.consumers)
    @rule(pick=st.integers(0, 5), times=st.integers(1, 3))
    def consumer_get(self, pick: int, times: int) -> None:
        ci = self.consumer(pick)
        c = self.consumers[ci]
        for _ in range(times):
            if not self.ready:
                with pytest.raises(ackqueue.Empty):
                    c.get_nowait()
                return
            seq, value = self.pop_head()
            obj = c.get_nowait()
            assert same(obj, value)
            delivery = c.deliveries()[-1]
            assert delivery.item is obj
            assert c.delivery(obj).item is obj
            self.held[ci].append(ModelHold(seq, value, obj, delivery.id))

    def _settle_by_object(self, pick: int, index: int, ack: bool) -> None:
        ci = self.consumer(pick)
        holds = self.held[ci]
        obj = holds[index % len(holds)].obj
        # The contract: an ack or nack of an object settles this consumer's oldest hold of it.
        first = next(i for i, h in enumerate(holds) if h.obj is obj)
        hold = holds.pop(first)
        (self.consumers[ci].ack if ack else self.consumers[ci].nack)(obj)
        self._settled(ci, hold, ack)

    def _settle_by_id(self, pick: int, index: int, ack: bool) -> None:
        ci = self.consumer(pick)
        hold = self.held[ci].pop(index % len(self.held[ci]))
        c = self.consumers[ci]
        (c.ack_id if ack else c.nack_id)(hold.delivery_id)
        self._settled(ci, hold, ack)

    def _settled(self, ci: int, hold: ModelHold, ack: bool) -> None:
        self.settled_ids.append((ci, hold.delivery_id))
        if not ack:
            self.make_ready(hold.seq, hold.value)

    def _holding(self, pick: int) -> bool:
        return bool(self.consumers) and bool(self.held[self.consumer(pick)])

    @rule(pick=st.integers(0, 5), index=st.integers(0, 9), ack=st.booleans())
    def settle_by_object(self, pick: int, index: int, ack: bool) -> None:
        if self._holding(pick):
            self._settle_by_object(pick, index, ack)

    @rule(pick=st.integers(0, 5), index=st.integers(0, 9), ack=st.booleans())
    def settle_by_id(self, pick: int, index: int, ack: bool) -> None:
        if self._holding(pick):
            self._settle_by_id(pick, index, ack)

    @precondition(lambda self: self.consumers)
    @rule(pick=st.integers(0, 5), how=st.sampled_from(["close", "with", "drop"]))
    def consumer_goes_away(self, pick: int, how: str) -> None:
        ci = self.consumer(pick)
        c = self.consumers[ci]
        if how == "close":
            c.close()
        elif how == "with":
            with c:
                pass
        self.give_back_all(ci)
        if how == "drop":
            del self.consumers[ci]
            del self.held[ci]
            self.settled_ids = [(i - (i > ci), d) for i, d in self.settled_ids if i != ci]
            del c
            gc.collect()
        else:
            self.retire_consumer(ci)

    @precondition(lambda self: self.consumers)
    @rule(
        pick=st.integers(0, 5),
        index=st.integers(0, 9),
        what=st.sampled_from(["stranger", "other_consumer", "settled_id", "closed", "bad_id"]),
        verb=st.sampled_from(["ack", "nack"]),
    )
    def settle_what_is_not_held(self, pick: int, index: int, what: str, verb: str) -> None:
        ci = self.consumer(pick)
        c = self.consumers[ci]
        mine = [h.obj for h in self.held[ci]]
        if what == "stranger":
            target, by_id = Job(index), False
        elif what == "other_consumer":
            others = [
                h.obj
                for i, holds in enumerate(self.held)
                if i != ci
                for h in holds
                if not any(h.obj is m for m in mine)
            ]
            if not others:
                return
            target, by_id = others[index % len(others)], False
        elif what == "settled_id":
            ids = [d for i, d in self.settled_ids if i == ci]
            if not ids:
                return
            target, by_id = ids[index % len(ids)], True
        elif what == "bad_id":
            target, by_id = -1 - index, True
        else:
            if not self.closed_consumers:
                return
            c = self.closed_consumers[index % len(self.closed_consumers)]
            target, by_id = Job(index), False
        before = self.snapshot()
        method = getattr(c, verb + ("_id" if by_id else ""))
        with pytest.raises(ackqueue.NotHeldError) as raised:
            method(target)
        assert isinstance(raised.value, ValueError)
        assert str(raised.value)
        assert self.snapshot() == before

    @rule()
    def reopen(self) -> None:
        old_consumers = self.consumers
        self.q.close()
        with pytest.raises(ackqueue.QueueClosedError):
            self.q.put("after close")
        for c in old_consumers:
            with pytest.raises(ackqueue.QueueClosedError):
                c.get_nowait()
        for ci in range(len(self.consumers)):
            self.give_back_all(ci)
        self.consumers, self.held, self.settled_ids = [], [], []
        self.closed_consumers = old_consumers[:3]
        self.q = self.queue_class(self.path)

    # -- checks ------------------------------------------------------------------------------

    @invariant()
    def counts_match(self) -> None:
        assert self.q.qsize() == len(self.ready)
        assert self.q.unacked_count() == sum(len(h) for h in self.held)
        assert self.q.empty() == (not self.ready)

    @invariant()
    def holds_match(self) -> None:
        for c, holds in zip(self.consumers, self.held, strict=True):
            deliveries = c.deliveries()
            assert [d.id for d in deliveries] == [h.delivery_id for h in holds]
            assert all(d.item is h.obj for d, h in zip(deliveries, holds, strict=True))

    def teardown(self) -> None:
        try:
            for c in self.consumers:
                c.close()
            for ci in range(len(self.consumers)):
                self.give_back_all(ci)
            drained = []
            for _ in bounded(100_000, "draining the queue"):
                try:
                    drained.append(self.q.get_nowait())
                except ackqueue.Empty:
                    break
            expected = [value for _, value in self.ready]
            assert len(drained) == len(expected)
            pairs = zip(drained, expected, strict=True)
            assert all(same(a, b) for a, b in pairs), (drained, expected)
        finally:
            self.q.close()
            shutil.rmtree(self.dir, ignore_errors=True)


class LifoMachine(QueueMachine):
    queue_class = ackqueue.LifoAckQueue

    @staticmethod
    def order(seq: int, value: Any) -> Any:
        return -seq


class PriorityMachine(QueueMachine):
    queue_class = ackqueue.PriorityAckQueue

    @staticmethod
    def order(seq: int, value: Any) -> Any:
        return (value, seq)

    @rule(value=st.integers(0, 5))
    def put(self, value: Any) -> None:
        super().put(value)


def tuned(max_examples: int) -> settings:
    # Measured: ~50-150 ms per example of 30 steps (fsync-bound). 100 FIFO examples find a
    # wrong choice between two held equal small ints (the rarest path here) in most runs.
    return settings(
        max_examples=max_examples,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


TestFifoModel = QueueMachine.TestCase
TestFifoModel.settings = tuned(100)
TestLifoModel = LifoMachine.TestCase
TestLifoModel.settings = tuned(40)
TestPriorityModel = PriorityMachine.TestCase
TestPriorityModel.settings = tuned(40)
