"""A PriorityAckQueue takes any item queue.PriorityQueue would, hashable or not, delays included.

The usual priority item is ``(priority, data)`` where ``data`` is a dict or a list: nothing
about delays, nacks, acks or reopening may need the item to be hashable.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import ackqueue
from ackqueue import Empty, ManualClock

# Unhashable shapes (dicts, lists, sets, bytearrays) nested in each other, and hashable ones.
leaves = st.none() | st.integers(-3, 3) | st.text(max_size=2) | st.binary(max_size=2)
payloads = (
    st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=2)
            | st.dictionaries(st.text(max_size=2), inner, max_size=2)
            | st.tuples(inner, inner)
        ),
        max_leaves=4,
    )
    | st.sets(st.integers(0, 3), max_size=2)
    | st.builds(bytearray, st.binary(max_size=2))
)

DELAYS = st.sampled_from([None, None, 5.0, 10.0])


def copy(item):
    """An equal but distinct object, as a reopened queue hands back."""
    return pickle.loads(pickle.dumps(item))


class PriorityItemsWithDelays(RuleBasedStateMachine):
    """The queue against a model: ready items (smallest first), delayed ones, held ones."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "q.fs")
        self.clock = ManualClock(1_000_000.0)
        self.open()
        self.n = 0
        self.ready: list[tuple] = []
        self.delayed: list[tuple[float, tuple]] = []
        self.held: list[tuple] = []  # the very objects the consumer got

    def open(self) -> None:
        self.q = ackqueue.PriorityAckQueue(self.path, clock=self.clock, autopack=False)
        self.c = self.q.connect()

    def teardown(self) -> None:
        self.q.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # Items are (priority, n, payload): ``n`` keeps distinct items comparable without ever
    # comparing payloads; an equal copy of an earlier item makes the queue compare payloads.
    @rule(priority=st.integers(0, 2), payload=payloads, delay=DELAYS)
    def put(self, priority, payload, delay) -> None:
        self.n += 1
        self._put((priority, self.n, payload), delay)

    @precondition(lambda self: self.ready or self.held or self.delayed)
    @rule(data=st.data(), delay=DELAYS)
    def put_an_equal_copy(self, data, delay) -> None:
        known = self.ready + self.held + [item for _, item in self.delayed]
        self._put(copy(data.draw(st.sampled_from(known))), delay)

    def _put(self, item, delay) -> None:
        self.q.put(item, delay=delay)
        if delay:
            self.delayed.append((self.clock() + delay, item))
        else:
            self.ready.append(item)

    @rule()
    def get(self) -> None:
        if not self.ready:
            try:
                got = self.c.get_nowait()
            except Empty:
                return
            raise AssertionError(f"got {got!r} from a queue with nothing ready")
        got = self.c.get_nowait()
        expected = min(self.ready)
        assert got == expected
        self.ready.remove(expected)
        self.held.append(got)

    @rule(n=st.integers(1, 3))
    def get_many(self, n) -> None:
        if not self.ready:
            return
        got = self.c.get_many(n, block=False)
        expected = sorted(self.ready)[:n]
        assert got == expected
        for item in expected:
            self.ready.remove(item)
        self.held += got

    @precondition(lambda self: self.held)
    @rule(data=st.data(), delay=DELAYS)
    def nack(self, data, delay) -> None:
        item = data.draw(st.sampled_from(self.held))
        self.c.nack(item, delay=delay)
        self._drop_held(item)
        if delay:
            self.delayed.append((self.clock() + delay, item))
        else:
            self.ready.append(item)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def ack(self, data) -> None:
        item = data.draw(st.sampled_from(self.held))
        self.c.ack(item)
        self._drop_held(item)

    @rule()
    def time_passes(self) -> None:
        self.clock.advance(5.0)
        now = self.clock()
        self.ready += [item for due, item in self.delayed if due <= now]
        self.delayed = [(due, item) for due, item in self.delayed if due > now]

    @rule()
    def reopen(self) -> None:
        self.q.close()
        self.ready += self.held
        self.held = []
        self.open()

    @invariant()
    def counts_agree(self) -> None:
        assert self.q.qsize() == len(self.ready)
        assert self.q.delayed_count() == len(self.delayed)
        assert self.q.unacked_count() == len(self.held)

    def _drop_held(self, item) -> None:
        for i, held in enumerate(self.held):
            if held is item:
                del self.held[i]
                return
        raise AssertionError("the model lost a held item")


PriorityItemsWithDelays.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
test_priority_queue_with_delays_takes_unhashable_items = PriorityItemsWithDelays.TestCase


def test_a_dict_priority_item_put_with_a_delay_is_delivered_when_due(tmp_path):
    clock = ManualClock()
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.PriorityAckQueue(path, clock=clock) as q:
        q.put((1, {"url": "https://example.org/b"}), delay=60)
        q.put((2, {"url": "https://example.org/a"}))
        c = q.connect()
        item = c.get_nowait()
        c.nack(item, delay=30)
        assert (q.qsize(), q.delayed_count()) == (0, 2)
    with ackqueue.PriorityAckQueue(path, clock=clock) as q:
        assert (q.qsize(), q.delayed_count()) == (0, 2)
        clock.advance(60)
        assert q.get_nowait() == (1, {"url": "https://example.org/b"})
        assert q.get_nowait() == (2, {"url": "https://example.org/a"})


def test_dict_priority_items_work_in_shared_mode_with_delays_nacks_and_acks(tmp_path):
    # Shared mode files held and taken keys in memory too: those sets must not need hashing.
    # A manual clock: with real delays a slow machine let both delays pass before the second
    # get, which then rightly returned a ready (1, ...) before (2, ...) (CI failed so once).
    path = os.path.join(tmp_path, "q.fs")
    clock = ManualClock()
    with ackqueue.PriorityAckQueue(path, shared=True, clock=clock) as q:
        assert q.shared
        q.put((2, {"url": "b"}))
        q.put((1, {"url": "a"}))
        q.put((1, {"url": "a"}), delay=60)  # an equal item, delayed
        with q.connect() as c:
            first = c.get(timeout=5)
            assert first == (1, {"url": "a"})
            c.nack(first, delay=30)
            assert c.get(timeout=5) == (2, {"url": "b"})
            clock.advance(60)
            got = [c.get(timeout=5), c.get(timeout=5)]
            assert got == [(1, {"url": "a"})] * 2
            c.ack_many(got)
            with pytest.raises(Empty):
                c.get(timeout=0.3)
        assert q.get(timeout=5) == (2, {"url": "b"})  # given back when its consumer closed
