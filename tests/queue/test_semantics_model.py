"""A hypothesis state machine checks AckQueue against a plain model of its delivery rules.

Covered: priorities, batches, delays (put and nack), leases timed by an injected clock,
max_attempts counted durably (so across reopen), reject and the dead letters, requeue and
purge, transactions that commit or roll back, shutdown (graceful and immediate), and
closing/reopening the file.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ackqueue import AckQueue, Empty, LeaseExpiredError, ManualClock, ShutDown

MAX_ATTEMPTS = 3
LEASE = 10.0


@dataclass
class Item:
    value: str
    prio: int
    seq: int
    state: str = "ready"  # ready | delayed | held
    attempts: int = 0
    due: float = 0.0
    deadline: float = 0.0
    obj: object = None  # what get() returned, while held


@dataclass
class Model:
    items: dict[str, Item] = field(default_factory=dict)
    dead: list[tuple[str, int, int]] = field(default_factory=list)  # value, prio, attempts
    seq: int = 0

    def ready(self) -> list[Item]:
        return sorted((i for i in self.items.values() if i.state == "ready"), key=order)

    def held(self) -> list[Item]:
        return sorted((i for i in self.items.values() if i.state == "held"), key=order)

    def count(self, state: str) -> int:
        return sum(1 for i in self.items.values() if i.state == state)

    def bury(self, item: Item) -> None:
        del self.items[item.value]
        self.dead.append((item.value, item.prio, item.attempts))


def order(item: Item) -> tuple[int, int]:
    return (item.prio, item.seq)


class DeliveryRules(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.path = os.path.join(self.tmp, "q.fs")
        self.clock = ManualClock(start=1_000_000.0)
        self.model = Model()
        self.expired: list[object] = []
        self.counter = 0
        self.open()

    def open(self) -> None:
        self.q = AckQueue(self.path, max_attempts=MAX_ATTEMPTS, ack_timeout=LEASE, clock=self.clock)
        self.c = self.q.connect()

    def teardown(self) -> None:
        self.q.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- model steps shared by plain and transactional rules -----------------------------

    def new_value(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def model_put(self, m: Model, value: str, prio: int, delay: float | None) -> Item:
        m.seq += 1
        item = Item(value, prio, m.seq)
        if delay:
            item.state, item.due = "delayed", self.clock() + delay
        return item

    def model_get(self, m: Model, durable: list[tuple[str, str]]) -> Item | None:
        """The model's next delivery; attempt records go to ``durable`` too."""
        while True:
            ready = m.ready()
            if not ready:
                return None
            item = ready[0]
            if item.attempts >= MAX_ATTEMPTS:
                m.bury(item)
                durable.append(("bury", item.value))
                continue
            item.attempts += 1
            durable.append(("attempt", item.value))
            item.state, item.deadline = "held", self.clock() + LEASE
            return item

    def model_nack(self, m: Model, item: Item, delay: float | None) -> None:
        item.obj = None
        if item.attempts >= MAX_ATTEMPTS:
            m.bury(item)
        elif delay:
            item.state, item.due = "delayed", self.clock() + delay
        else:
            item.state = "ready"

    def real_get(self, expected: Item | None) -> object:
        if expected is None:
            with pytest.raises(Empty):
                self.c.get_nowait()
            return None
        got = self.c.get_nowait()
        assert got == expected.value
        assert self.c.delivery(got).attempts == expected.attempts
        expected.obj = got
        return got

    # -- rules ---------------------------------------------------------------------------

    @rule(prio=st.integers(-1, 1), delay=st.sampled_from([None, None, 5.0, 20.0]))
    def put(self, prio: int, delay: float | None) -> None:
        value = self.new_value()
        self.q.put(value, priority=prio, delay=delay)
        item = self.model_put(self.model, value, prio, delay)
        self.model.items[value] = item

    @rule()
    def get(self) -> None:
        self.real_get(self.model_get(self.model, []))

    @rule(n=st.integers(1, 4), prio=st.integers(-1, 1))
    def put_many(self, n: int, prio: int) -> None:
        values = [self.new_value() for _ in range(n)]
        self.q.put_many(values, priority=prio)
        for value in values:
            self.model.items[value] = self.model_put(self.model, value, prio, None)

    @rule(n=st.integers(1, 4))
    def get_many(self, n: int) -> None:
        expected = []
        for _ in range(n):
            item = self.model_get(self.model, [])
            if item is None:
                break
            expected.append(item)
        if not expected:
            with pytest.raises(Empty):
                self.c.get_many(n, block=False)
            return
        got = self.c.get_many(n, block=False)
        assert got == [item.value for item in expected]
        for obj, item in zip(got, expected, strict=True):
            assert self.c.delivery(obj).attempts == item.attempts
            item.obj = obj

    @precondition(lambda self: self.model.count("held"))
    @rule()
    def ack_many_all_held(self) -> None:
        held = self.model.held()
        self.c.ack_many([item.obj for item in held])
        for item in held:
            del self.model.items[item.value]

    @rule()
    def get_and_nack(self) -> None:
        """The retry loop of a failing worker: drives items to max_attempts quickly."""
        item = self.model_get(self.model, [])
        got = self.real_get(item)
        if item is not None:
            self.c.nack(got)
            self.model_nack(self.model, item, None)

    @precondition(lambda self: self.model.count("held"))
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "nack later", "reject"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        item = data.draw(st.sampled_from(self.model.held()))
        obj = item.obj
        if how == "ack":
            self.c.ack(obj)
            del self.model.items[item.value]
        elif how == "reject":
            self.c.reject(obj, reason="bad")
            self.model.bury(item)
        else:
            delay = 5.0 if how == "nack later" else None
            self.c.nack(obj, delay=delay)
            self.model_nack(self.model, item, delay)

    @rule(seconds=st.sampled_from([1.0, 4.0, 6.0, 11.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)
        now = self.clock()
        for item in self.model.items.values():
            if item.state == "held" and item.deadline <= now:
                self.expired.append(item.obj)
                item.state, item.obj = "ready", None
            elif item.state == "delayed" and item.due <= now:
                item.state = "ready"

    @precondition(lambda self: self.expired)
    @rule()
    def late_ack_is_fenced(self) -> None:
        with pytest.raises(LeaseExpiredError):
            self.c.ack(self.expired.pop())

    @rule(
        steps=st.lists(st.sampled_from(["put", "get", "ack", "nack"]), min_size=1, max_size=5),
        fail=st.booleans(),
    )
    def transaction(self, steps: list[str], fail: bool) -> None:
        before = copy.deepcopy(self.model)  # str items copy as themselves: identity is kept
        work = copy.deepcopy(self.model)
        durable: list[tuple[str, str]] = []
        settles: list[tuple[str, str]] = []
        puts: list[Item] = []
        try:
            with self.c.transaction():
                for step in steps:
                    if step == "put":  # not visible to gets until the commit
                        value = self.new_value()
                        self.q.put(value)
                        puts.append(self.model_put(work, value, 0, None))
                    elif step == "get":
                        self.real_get(self.model_get(work, durable))
                    else:
                        done = {value for value, _ in settles}
                        candidates = [i for i in work.held() if i.value not in done]
                        if candidates:
                            getattr(self.c, step)(candidates[0].obj)
                            settles.append((candidates[0].value, step))
                if fail:
                    raise Rollback
        except Rollback:
            self.model = before
            for kind, value in durable:  # attempts are recorded outside the transaction
                item = self.model.items[value]
                if kind == "bury":
                    self.model.bury(item)
                else:
                    item.attempts += 1
            self.model.seq = work.seq
            return
        for value, step in settles:
            if step == "ack":
                del work.items[value]
            else:
                self.model_nack(work, work.items[value], None)
        for item in puts:
            work.items[item.value] = item
        self.model = work

    @rule()
    def reopen(self) -> None:
        self.q.close()
        for item in self.model.items.values():
            if item.state == "held":
                item.state, item.obj = "ready", None
        self.expired.clear()
        self.open()

    @rule(immediate=st.booleans())
    def shutdown_and_restart(self, immediate: bool) -> None:
        self.q.shutdown(immediate=immediate)
        with pytest.raises(ShutDown):
            self.q.put("refused")
        if not immediate:  # gets go on until nothing is ready
            while (item := self.model_get(self.model, [])) is not None:
                self.real_get(item)
        with pytest.raises(ShutDown):
            self.c.get_nowait()
        self.reopen()  # nothing was destroyed: the next start sees it all

    @rule()
    def requeue_dead(self) -> None:
        assert self.q.requeue_dead() == len(self.model.dead)
        for value, prio, _attempts in self.model.dead:
            self.model.seq += 1
            self.model.items[value] = Item(value, prio, self.model.seq)
        self.model.dead.clear()

    @rule()
    def purge_dead(self) -> None:
        assert self.q.purge_dead() == len(self.model.dead)
        self.model.dead.clear()

    # -- what must always agree ----------------------------------------------------------

    @invariant()
    def counts_agree(self) -> None:
        m = self.model
        assert self.q.qsize() == m.count("ready")
        assert self.q.unacked_count() == m.count("held")
        assert self.q.delayed_count() == m.count("delayed")
        assert self.q.dead_count() == len(m.dead)

    @invariant()
    def dead_letters_agree(self) -> None:
        listed = [(d.item, d.attempts) for d in self.q.dead_letters()]
        assert listed == [(value, attempts) for value, _prio, attempts in self.model.dead]


class Rollback(Exception):
    pass


DeliveryRules.TestCase.settings = settings(
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "200")), stateful_step_count=30, deadline=None
)
test_delivery_rules = DeliveryRules.TestCase
