"""A stateful test of puts by key against a model: keys live while their item is ready or held,
remembered after an ack when put with ``unique=``, forgotten on request; revisits; remove.

The model: the ready items in delivery order (put order; a nack puts an item back in its
place), what the consumer holds, and the seen-set with each key's expiry on the queue's clock.
It runs on one process's queue and on a shared one (``shared=True``, over its own server).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from polling import wait_until

import ackqueue
from ackqueue import ManualClock

KEYS = st.sampled_from(["a", "b", "c", b"a", "d"])  # "a" and b"a" are two keys
SCOPES = st.sampled_from([None, "forever", 10.0])
TTL_OF = {None: None, "forever": float("inf"), 10.0: 10.0}


@dataclass
class Live:
    seq: int
    key: str | bytes
    payload: tuple[object, int]
    remember: float | None


class KeysMachine(RuleBasedStateMachine):
    shared = False

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ackqueue-keys-")
        self.path = os.path.join(self.dir, "q.fs")
        self.clock = ManualClock()
        self.q = self._open()
        self.c = self.q.connect()
        self.seq = 0
        self.n = 0
        self.ready: list[Live] = []
        self.held: list[tuple[Live, object]] = []  # (model item, the object got)
        self.seen: dict[str | bytes, float] = {}  # key -> until (queue clock)

    def _open(self) -> ackqueue.AckQueue:
        return ackqueue.AckQueue(self.path, clock=self.clock, shared=self.shared or None)

    def teardown(self) -> None:
        self.q.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model ------------------------------------------------------------------------------

    def live(self, key: str | bytes) -> Live | None:
        for item in self.ready + [h for h, _ in self.held]:
            if type(item.key) is type(key) and item.key == key:
                return item
        return None

    def is_seen(self, key: str | bytes) -> bool:
        until = self.seen.get((type(key).__name__, key))  # type: ignore[call-overload]
        return until is not None and until > self.clock()

    def model_put(self, key: str | bytes, scope: object, replace: bool) -> bool:
        self.n += 1
        payload = (key, self.n)
        live = self.live(key)
        if live is not None:
            if replace and live in self.ready:
                live.payload = payload
                return True
            return False
        if self.is_seen(key):
            return False
        self.seq += 1
        self.ready.append(Live(self.seq, key, payload, TTL_OF[scope]))  # type: ignore[index]
        return True

    def done(self, live: Live) -> None:
        if live.remember is not None:
            self.seen[(type(live.key).__name__, live.key)] = self.clock() + live.remember  # type: ignore[index]

    # -- rules -------------------------------------------------------------------------------

    @rule(key=KEYS, scope=SCOPES, replace=st.booleans())
    def put(self, key: str | bytes, scope: object, replace: bool) -> None:
        expected = self.model_put(key, scope, replace)
        got = self.q.put((key, self.n), key=key, unique=scope, replace=replace)
        assert got is expected

    @rule(keys=st.lists(KEYS, min_size=1, max_size=4), scope=SCOPES)
    def put_many(self, keys: list[str | bytes], scope: object) -> None:
        expected = [self.model_put(k, scope, False) for k in keys]
        items = [(k, self.n - len(keys) + 1 + i) for i, k in enumerate(keys)]
        assert self.q.put_many(items, keys=keys, unique=scope) == expected

    @rule()
    def plain_put_is_unchanged(self) -> None:
        self.n += 1
        assert self.q.put(("plain", self.n)) is None
        self.seq += 1
        self.ready.append(Live(self.seq, ("plain", self.n), ("plain", self.n), None))  # type: ignore[arg-type]

    @precondition(lambda self: self.ready)
    @rule()
    def get(self) -> None:
        got = self.c.get(timeout=10)
        head = self.ready.pop(0)
        assert got == head.payload
        self.held.append((head, got))

    @precondition(lambda self: self.ready)
    @rule()
    def plain_get_counts_as_done(self) -> None:
        got = self.q.get(timeout=10)
        head = self.ready.pop(0)
        assert got == head.payload
        self.done(head)

    @precondition(lambda self: self.held)
    @rule(i=st.integers(0, 10), outcome=st.sampled_from(["ack", "nack", "reject"]))
    def settle(self, i: int, outcome: str) -> None:
        live, obj = self.held.pop(i % len(self.held))
        getattr(self.c, outcome)(obj)
        if outcome == "ack":
            self.done(live)
        elif outcome == "nack":
            self.ready.append(live)
            self.ready.sort(key=lambda item: item.seq)

    @rule(key=KEYS)
    def forget(self, key: str | bytes) -> None:
        expected = self.is_seen(key)
        self.seen.pop((type(key).__name__, key), None)  # type: ignore[arg-type]
        assert self.q.forget(key) is expected

    @rule(key=KEYS)
    def remove(self, key: str | bytes) -> None:
        live = self.live(key)
        if live is None:
            with pytest.raises(ackqueue.UnknownKeyError):
                self.q.remove(key)
        elif live not in self.ready:
            with pytest.raises(ackqueue.KeyHeldError):
                self.q.remove(key)
        else:
            self.q.remove(key)
            self.ready.remove(live)

    @rule(r=st.integers(0, 2))
    def remove_where(self, r: int) -> None:
        doomed = [item for item in self.ready if item.payload[1] % 3 == r]
        assert self.q.remove_where(lambda p: p[1] % 3 == r) == len(doomed)
        self.ready = [item for item in self.ready if item not in doomed]

    @rule(keys=st.lists(KEYS, min_size=1, max_size=3), fail=st.booleans())
    def transaction(self, keys: list[str | bytes], fail: bool) -> None:
        """Puts by key and an ack in one transaction: all or nothing, the dedup included."""
        saved = ([*self.ready], [*self.held], dict(self.seen), self.seq)
        payloads = {id(x): x.payload for x in self.ready + [h for h, _ in self.held]}
        # An item acked in the transaction keeps its key for the puts of the same transaction.
        expected = [self.model_put(k, "forever", False) for k in keys]
        acked = self.held.pop(0) if self.held else None
        if acked is not None:
            self.done(acked[0])
        first = self.n - len(keys) + 1
        expecting = pytest.raises(RuntimeError) if fail else contextlib.nullcontext()
        with expecting, self.c.transaction():
            if acked is not None:
                self.c.ack(acked[1])
            got = [self.q.put((k, first + i), key=k, unique="forever")
                   for i, k in enumerate(keys)]
            assert got == expected
            if fail:
                raise RuntimeError("roll back")
        if fail:
            self.ready, self.held, self.seen, self.seq = saved[0], saved[1], saved[2], saved[3]
            for x in self.ready + [h for h, _ in self.held]:
                x.payload = payloads[id(x)]

    @rule(key=KEYS)
    def seen_answers(self, key: str | bytes) -> None:
        assert self.q.seen(key) is self.is_seen(key)

    @rule(seconds=st.sampled_from([1.0, 6.0, 11.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: not self.shared)
    @rule()
    def reopen(self) -> None:
        """A restart: held items are back in their place; the seen-set stays."""
        self.q.close()
        self.q = self._open()
        self.c = self.q.connect()
        self.ready = sorted(self.ready + [h for h, _ in self.held], key=lambda item: item.seq)
        self.held = []

    @invariant()
    def counts_agree(self) -> None:
        if self.shared:  # qsize() is an estimate there, caught up by the session's watcher
            wait_until(lambda: self.q.qsize() == len(self.ready), 10, "the ready estimate")
        assert self.q.qsize() == len(self.ready)
        assert self.q.unacked_count() == len(self.held)


class SharedKeysMachine(KeysMachine):
    shared = True


TestKeysModel = KeysMachine.TestCase
TestKeysModel.settings = settings(
    max_examples=int(os.environ.get("KEYS_EXAMPLES", "25")), stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSharedKeysModel = SharedKeysMachine.TestCase
TestSharedKeysModel.settings = settings(
    max_examples=int(os.environ.get("KEYS_EXAMPLES", "20")), stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
