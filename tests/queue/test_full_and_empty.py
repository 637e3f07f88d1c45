"""``full()`` and ``empty()`` say what ``put_nowait`` and ``get_nowait`` will do, as
``queue.Queue`` promises: ``full()`` is True exactly when ``put_nowait`` raises ``Full``, and
``empty()`` exactly when ``get_nowait`` raises ``Empty``, in every state a queue with groups,
delays, holds, pauses and transactions can be in.

``maxsize`` counts the ready items of every group (also those that may not be delivered now)
and the puts on their way, transactions' included; ``qsize()`` counts only what may be
delivered now, so ``full()`` cannot be ``maxsize <= qsize()`` on such a queue.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from polling import wait_for_waiter
from semantic_helpers import put_in_flight

import ackqueue

GROUPS = ["a", "b", None]


class _Abort(Exception):
    """Leaves a probing transaction without committing it."""


def put_nowait_raises_full(q: ackqueue.AckQueue[Any], item: object, **options: Any) -> bool:
    try:
        q.put_nowait(item, **options)
    except ackqueue.Full:
        return True
    return False


def test_a_queue_without_maxsize_is_never_full(qpath):
    """``maxsize`` 0 (the default) bounds nothing: ``full()`` stays False however many items
    wait, as ``queue.Queue``'s does, and ``put_nowait`` never raises ``Full``."""
    with ackqueue.AckQueue(qpath) as q:
        assert not q.full()
        for i in range(3):
            assert not put_nowait_raises_full(q, i)
            assert not q.full()
        q.pause_group("a", 60)
        q.put("a0", group="a")  # waiting, but taking no place: there are no places
        assert not q.full() and q.qsize() == 3


def test_full_counts_the_items_of_a_paused_group(qpath):
    with ackqueue.AckQueue(qpath, maxsize=2) as q:
        q.put_many(["x", "y"], group="host")
        q.pause_group("host", 60)
        assert q.qsize() == 0  # nothing may be delivered now
        assert q.full()  # but the two items take maxsize's places
        assert put_nowait_raises_full(q, "z")


def test_full_counts_the_items_of_a_group_at_its_cap(qpath):
    with ackqueue.AckQueue(qpath, maxsize=2, max_held_per_group=1) as q, q.connect() as c:
        q.put_many(["x", "y"], group="host")
        assert c.get_nowait() == "x"  # the group is at its cap: "y" may not be delivered now
        assert q.qsize() == 0 and not q.full()  # held items take no place
        q.put("w", group="host")
        assert q.qsize() == 0 and q.full()
        assert put_nowait_raises_full(q, "v")


def test_full_counts_the_puts_of_a_transaction_not_yet_committed(qpath):
    with ackqueue.AckQueue(qpath, maxsize=2) as q:
        with q.transaction():
            q.put("x")
            q.put("y")
            assert q.full()
            assert put_nowait_raises_full(q, "z")
        assert q.full() and q.qsize() == 2


def test_a_put_in_another_thread_waits_for_the_places_a_transaction_took(qpath):
    """Outside the transaction, a put must not take a place the transaction's puts hold:
    once they commit, the queue would hold more than ``maxsize`` items."""
    with ackqueue.AckQueue(qpath, maxsize=2) as q:
        staged, commit = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def put_in_a_transaction() -> None:
            try:
                with q.transaction():
                    q.put_many(["x", "y"])
                    staged.set()
                    commit.wait(30)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
                staged.set()

        t = threading.Thread(target=put_in_a_transaction)
        t.start()
        try:
            assert staged.wait(30) and not errors
            assert q.full()
            assert put_nowait_raises_full(q, "z")
            with pytest.raises(ackqueue.Full):
                q.put_many(["z"], block=False)
        finally:
            commit.set()
            t.join(30)
        assert not errors
        assert q.qsize() == 2 and q.full()


# A put waiting for room must wake when a place frees, whatever frees it: full() says False
# from then on, and the put would otherwise wait for a get that may never come.


class WaitingPut:
    """A put on a full ``q``, in a thread of its own, waiting for room (without a timeout:
    queue.Queue's own wait polls nothing, so a missed wake-up is a put that never returns)."""

    def __init__(self, q: ackqueue.AckQueue[Any]) -> None:
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._put, args=(q,), daemon=True)
        self._thread.start()
        wait_for_waiter(q.not_full)

    def _put(self, q: ackqueue.AckQueue[Any]) -> None:
        q.put("waiting")
        self.done.set()

    def went_on(self) -> bool:
        return self.done.wait(10)


def test_a_put_waiting_for_room_goes_on_when_a_put_in_flight_lands_delayed(qpath):
    with ackqueue.AckQueue(qpath, maxsize=1) as q:
        with put_in_flight(q, "later", delay=600):
            waiting = WaitingPut(q)  # the put in flight holds the only place
        assert waiting.went_on(), "the put still waits, although the delayed item left room"
        assert q.delayed_count() == 1 and q.qsize() == 1


def test_a_put_waiting_for_room_goes_on_when_a_transaction_puts_an_item_delayed(qpath):
    with ackqueue.AckQueue(qpath, maxsize=1) as q:
        staged, commit = threading.Event(), threading.Event()

        def put_in_a_transaction() -> None:
            with q.transaction():
                q.put("later", delay=600)
                staged.set()
                commit.wait(30)

        t = threading.Thread(target=put_in_a_transaction)
        t.start()
        try:
            assert staged.wait(30) and q.full()
            waiting = WaitingPut(q)
        finally:
            commit.set()
            t.join(30)
        assert waiting.went_on(), "the put still waits, although the delayed item left room"
        assert q.delayed_count() == 1 and q.qsize() == 1


@pytest.mark.parametrize("how", ["remove", "remove_where", "replace with a delay"])
def test_a_put_waiting_for_room_goes_on_when_a_waiting_item_leaves(qpath, how):
    with ackqueue.AckQueue(qpath, maxsize=1) as q:
        q.put("x", key="k")
        waiting = WaitingPut(q)
        if how == "remove":
            q.remove("k")
        elif how == "remove_where":
            assert q.remove_where(lambda item: item == "x") == 1
        else:
            assert q.put("x, later", key="k", replace=True, delay=600)
        assert waiting.went_on(), f"the put still waits after a {how}"
        assert q.full() and q.qsize() == 1


def test_empty_is_true_while_the_queue_is_paused(qpath):
    with ackqueue.AckQueue(qpath) as q:
        q.put("x")
        q.pause()
        assert q.qsize() == 1  # the item is counted (tests/queue/test_pause.py)
        assert q.empty()  # but a get finds nothing, as on an empty queue
        with pytest.raises(ackqueue.Empty):
            q.get_nowait()
        q.resume()
        assert not q.empty() and q.get_nowait() == "x"


class FullAndEmptyMachine(RuleBasedStateMachine):
    """Random operations on a real bounded queue file; each put_nowait and get_nowait is
    checked against what full() and empty() said just before it."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "q.fs")
        self.clock = ackqueue.ManualClock(1_000_000.0)
        self.seq = 0
        self.held: list[Any] = []

    @initialize(
        maxsize=st.integers(1, 3),
        cap=st.sampled_from([None, 1]),
        interval=st.sampled_from([0.0, 5.0]),
    )
    def open_queue(self, maxsize: int, cap: int | None, interval: float) -> None:
        self.options = {
            "maxsize": maxsize, "max_held_per_group": cap, "group_interval": interval,
        }
        self.open()

    def open(self) -> None:
        self.q: ackqueue.AckQueue[int] = ackqueue.AckQueue(
            self.path, clock=self.clock, **self.options
        )
        self.c = self.q.connect()
        self.held = []

    def teardown(self) -> None:
        if hasattr(self, "q"):
            self.q.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def next_item(self) -> int:
        self.seq += 1
        return self.seq

    # -- the checked operations -------------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), delay=st.sampled_from([None, 3.0]))
    def put_nowait(self, group: str | None, delay: float | None) -> None:
        full = self.q.full()
        raised = put_nowait_raises_full(self.q, self.next_item(), group=group, delay=delay)
        assert raised == full, f"full() said {full}, put_nowait raised Full: {raised}"

    @rule(group=st.sampled_from(GROUPS))
    def put_many_of_one_without_waiting(self, group: str | None) -> None:
        full = self.q.full()
        try:
            self.q.put_many([self.next_item()], block=False, group=group)
            raised = False
        except ackqueue.Full:
            raised = True
        assert raised == full, f"full() said {full}, put_many raised Full: {raised}"

    @rule(key=st.sampled_from(["k1", "k2"]), delay=st.sampled_from([None, 3.0]))
    def put_by_key_replacing(self, key: str, delay: float | None) -> None:
        """A new key takes a place as any put; a live one is replaced in place (a delay
        moves it out of maxsize's count until it is due)."""
        full = self.q.full()
        try:
            self.q.put(self.next_item(), block=False, key=key, replace=True, delay=delay)
            raised = False
        except ackqueue.Full:
            raised = True
        assert not raised or full, "put by key raised Full while full() said False"

    @rule(key=st.sampled_from(["k1", "k2"]))
    def remove_by_key(self, key: str) -> None:
        with contextlib.suppress(ackqueue.UnknownKeyError, ackqueue.KeyHeldError):
            self.q.remove(key)

    @rule()
    def get_nowait(self) -> None:
        empty = self.q.empty()
        try:
            self.q.get_nowait()
        except ackqueue.Empty:
            assert empty, "empty() said False, get_nowait raised Empty"
        else:
            assert not empty, "empty() said True, get_nowait returned an item"

    @rule()
    def consumer_get_nowait(self) -> None:
        empty = self.q.empty()
        try:
            self.held.append(self.c.get_nowait())
        except ackqueue.Empty:
            assert empty, "empty() said False, a consumer's get_nowait raised Empty"
        else:
            assert not empty, "empty() said True, a consumer's get_nowait returned an item"

    @rule(n=st.integers(1, 3), commit=st.booleans(), group=st.sampled_from(GROUPS))
    def puts_in_a_transaction(self, n: int, commit: bool, group: str | None) -> None:
        try:
            with self.q.transaction():
                for _ in range(n):
                    full = self.q.full()
                    raised = put_nowait_raises_full(self.q, self.next_item(), group=group)
                    assert raised == full, f"in a transaction full() said {full}, Full: {raised}"
                    if raised:
                        break
                if not commit:
                    raise _Abort
        except _Abort:
            pass

    # -- what changes the state ----------------------------------------------------------------

    @precondition(lambda self: self.held)
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "snooze"]))
    def settle(self, data: st.DataObject, how: str) -> None:
        item = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        if how == "ack":
            self.c.ack(item)
        elif how == "nack":
            self.c.nack(item)
        else:
            self.c.snooze(item, 3.0)

    @rule(seconds=st.sampled_from([1.0, 5.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(group=st.sampled_from(["a", "b"]), seconds=st.sampled_from([0.0, 4.0]))
    def pause_group(self, group: str, seconds: float) -> None:
        self.q.pause_group(group, seconds)

    @rule(group=st.sampled_from(["a", "b"]), max_held=st.sampled_from([None, 1]))
    def set_group(self, group: str, max_held: int | None) -> None:
        self.q.set_group(group, max_held=max_held)

    @rule(paused=st.booleans())
    def pause_the_queue(self, paused: bool) -> None:
        if paused:
            self.q.pause()
        else:
            self.q.resume()

    @rule()
    def reopen(self) -> None:
        self.q.close()
        self.open()

    # -- a check in every state, that changes nothing ------------------------------------

    @invariant()
    def a_put_in_an_undone_transaction_agrees_with_full(self) -> None:
        if not hasattr(self, "q"):
            return
        full = self.q.full()
        try:
            with self.q.transaction():
                raised = put_nowait_raises_full(self.q, "probe")
                raise _Abort
        except _Abort:
            pass
        assert raised == full, f"full() said {full}, a put in a transaction raised Full: {raised}"


FullAndEmptyMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("ACKQUEUE_MODEL_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_full_and_empty_agree_with_put_nowait_and_get_nowait = FullAndEmptyMachine.TestCase
