"""Putting: how an item is pickled, keyed, stored and made ready.

A put runs the standard library's ``put`` (blocking and ``maxsize`` are its own), whose
``_put`` hook is :meth:`Puts.stage`: the item is pickled and keyed, and counted as staged so
that a get can wait for it to land. Then the put commits, and the item is ready (or delayed).
``put_many`` stages a whole batch once there is room for all of it and commits it at once.
Inside ``transaction()``, puts are staged now and land when the transaction commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ackqueue.base.interrupts import checkpoint, hold_back
from ackqueue.delivery.groups import check_group
from ackqueue.delivery.ordering import Ordering
from ackqueue.errors import Full
from ackqueue.queue.calls import calling_stdlib, check_timeout
from ackqueue.queue.core import Core
from ackqueue.storage.items import Staged, pickle_item
from ackqueue.storage.transactions import Transaction, current

StdlibPut = Callable[[Any, bool, float | None], None]


class Puts:
    def __init__(
        self, core: Core, stdlib_put: StdlibPut, ordering: Ordering, maxsize: int
    ) -> None:
        self._signals, self._life, self._tasks = core.signals, core.life, core.tasks
        self._book, self._supply, self._mode = core.book, core.supply, core.mode
        self._meter, self._calls, self._clock = core.meter, core.calls, core.clock
        self._store = core.book.store
        self._stdlib_put = stdlib_put
        self._order = ordering
        self._maxsize = maxsize

    def due_time(self, delay: float | None, not_before: float | None) -> float:
        """When an item put with ``delay`` or ``not_before`` is due (0: at once)."""
        if delay is not None and not_before is not None:
            raise ValueError("give delay= or not_before=, not both")
        if delay is not None:
            if delay < 0:
                raise ValueError(f"delay must not be negative, not {delay!r}")
            return self._clock() + delay if delay else 0.0
        return float(not_before or 0.0)

    def _staged(
        self, item: Any, data: bytes, priority: int, due: float = 0.0, group: str | None = None
    ) -> Staged:
        seq = self._mode.next_seq_locked()
        key = self._order.make_key(seq, priority, item, self._supply.head)
        return Staged(key, seq, data, due, group)

    def stage(self, item: Any) -> None:
        """The ``_put`` hook (the mutex is held): pickle and key the item."""
        hold_back()  # staging takes a place in the queue: see interrupts.py
        self._life.check_can_put()
        self._calls.staged = self._staged(item, pickle_item(item), self._calls.priority)
        self._supply.staged += 1

    def put(
        self,
        item: Any,
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        group: str | None = None,
    ) -> None:
        check_group(group)
        tx = current(self._store)
        if tx is not None:
            self.put_in_transaction(tx, [item], block, timeout, priority, due, group)
            return
        calls = self._calls
        calls.priority = priority
        calls.staged = None
        with calling_stdlib(calls, "put", undo=lambda: self._unstage(counted=False)):
            self._stdlib_put(item, block, timeout)
        staged = calls.staged
        calls.staged = None
        if staged is None:
            return  # a subclass's _put chose not to store it
        staged.not_before = due
        staged.group = group
        try:
            self._store.run(self._book.inserter([staged], self._clock()))
        except BaseException:
            self._unstage(counted=True, staged=staged)
            raise
        with self._signals.mutex:
            self._supply.staged -= 1
            self._supply.land_staged_locked(staged)
            self._meter.put_locked(1)
            self._signals.landed.notify_all()

    def _unstage(self, counted: bool, staged: Staged | None = None) -> None:
        """A staged put failed: it takes no place any more (nor counts for ``join``)."""
        staged = staged or self._calls.staged
        self._calls.staged = None
        if staged is None:
            return
        with self._signals.mutex:
            self._supply.staged -= 1
            if counted:
                self._tasks.unfinished -= 1
            self._signals.landed.notify_all()
            self._signals.not_full.notify()

    def put_many(
        self,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        group: str | None = None,
    ) -> None:
        check_group(group)
        tx = current(self._store)
        if tx is not None:
            self.put_in_transaction(tx, items, block, timeout, priority, due, group)
            return
        if not items:
            return
        batch = self.stage_batch(items, block, timeout, priority, due, False, group)
        signals, supply = self._signals, self._supply
        try:
            self._store.run(self._book.inserter(batch, self._clock()))
        except BaseException:
            with signals.mutex:
                supply.staged -= len(batch)
                self._tasks.unfinished -= len(batch)
                signals.landed.notify_all()
                signals.not_full.notify(len(batch))
            raise
        with signals.mutex:
            supply.staged -= len(batch)
            for staged in batch:
                supply.land_staged_locked(staged)
            self._meter.put_locked(len(batch))
            signals.landed.notify_all()

    def put_in_transaction(
        self,
        tx: Transaction,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        group: str | None = None,
    ) -> None:
        if not items:
            return
        batch = self.stage_batch(items, block, timeout, priority, due, True, group)
        signals, supply = self._signals, self._supply

        def land() -> None:
            with signals.mutex:
                supply.tx_staged -= len(batch)
                self._tasks.added_locked(len(batch))
                for staged in batch:
                    supply.land_staged_locked(staged)
                self._meter.put_locked(len(batch))

        def drop() -> None:
            with signals.mutex:
                supply.tx_staged -= len(batch)
                signals.not_full.notify(len(batch))

        tx.add(self._book.inserter(batch, self._clock()), after_commit=land, undo=drop)

    def stage_batch(
        self,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        in_tx: bool,
        group: str | None = None,
    ) -> list[Staged]:
        """Pickle and key ``items`` once there is room for all of them."""
        datas = [pickle_item(item) for item in items]
        n, maxsize = len(items), self._maxsize
        if maxsize > 0 and n > maxsize:
            raise ValueError(f"a batch of {n} items can never fit in maxsize {maxsize}")
        if maxsize > 0:  # as queue.Queue.put: an unbounded put never waits, so never checks
            check_timeout(block, timeout)
        deadline = None if timeout is None or maxsize <= 0 else time.monotonic() + timeout
        signals, supply = self._signals, self._supply
        with signals.not_full:
            while True:
                self._life.check_can_put()
                if maxsize <= 0 or supply.waiting() + n <= maxsize:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise Full
                checkpoint(self._wake_waits)
                signals.not_full.wait(remaining)
            hold_back()  # the batch takes its places now: see interrupts.py
            batch = [
                self._staged(item, data, priority, due, group)
                for item, data in zip(items, datas, strict=True)
            ]
            if in_tx:
                supply.tx_staged += n
            else:
                supply.staged += n
                self._tasks.added_locked(n)
                signals.not_empty.notify(n)
        return batch

    def requeue_dead(self, ids: list[int] | None) -> int:
        """Put dead letters back at the end with a fresh attempt count; return how many."""
        signals = self._signals
        with signals.mutex:
            self._life.check_can_put()
            fresh: dict[int, Staged] = {}
            for dead_id, old_key in self._book.dead_keys(ids):
                seq = self._mode.next_seq_locked()
                fresh[dead_id] = Staged(self._order.rekey(old_key, seq), seq, b"")
        moved = self._store.run(self._book.requeuer(fresh)) if fresh else []
        with signals.mutex:
            self._tasks.added_locked(len(moved))
            for staged in moved:
                self._supply.offer_locked(staged.key, staged.group)
        return len(moved)

    def _wake_waits(self) -> None:
        with self._signals.mutex:
            self._signals.wake_all_locked()
