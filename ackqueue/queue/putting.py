"""Putting: how an item is encoded (its queue's serializer), keyed, stored and made ready.

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
from ackqueue.delivery.conditions import notify_waiting
from ackqueue.delivery.groups import check_group
from ackqueue.delivery.ordering import Ordering
from ackqueue.errors import Full
from ackqueue.queue.core import Core, calling_stdlib, check_timeout
from ackqueue.storage.items import Staged
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
        if self._order.kind == "priority":
            item = self._book.codec.key_form(item, data)
        key = self._order.make_key(seq, priority, item, self._supply.head)
        return Staged(key, seq, data, due, group)

    def stage(self, item: Any) -> None:
        """The ``_put`` hook (the mutex is held): pickle and key the item."""
        hold_back()  # staging takes a place in the queue: see interrupts.py
        self._life.check_can_put()
        self._calls.staged = self._staged(item, self._book.codec.encode(item), self._calls.priority)
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
        if self._put_in_open_transaction([item], block, timeout, priority, due, group):
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
        self._commit([staged])

    def _put_in_open_transaction(
        self,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        group: str | None,
    ) -> bool:
        """Check ``group``; inside a transaction, stage ``items`` in it and say so (True)."""
        if group is not None:
            check_group(group)
        tx = current(self._store)
        if tx is None:
            return False
        self.put_in_transaction(tx, items, block, timeout, priority, due, group)
        return True

    def _commit(self, batch: list[Staged]) -> None:
        """Store the staged ``batch`` (one commit), then land it; if that fails, unstage it."""
        try:
            self._store.run(self._book.inserter(batch, self._clock()))
        except BaseException:
            with self._signals.mutex:
                self.unstaged_locked(len(batch), in_tx=False)
            raise
        with self._signals.mutex:
            self.landed_locked(batch, in_tx=False)

    def _unstage(self, counted: bool) -> None:
        """The standard library's put failed around the hook: what it staged takes no place
        any more (nor counts for ``join`` if it was ``counted``)."""
        staged, self._calls.staged = self._calls.staged, None
        if staged is not None:
            with self._signals.mutex:
                self.unstaged_locked(1, in_tx=False, counted=counted)

    # -- landing: what staged puts do in memory once their commit is known --------------------

    def landed_locked(
        self,
        batch: list[Staged],
        in_tx: bool,
        stored: list[bool] | None = None,
        cache: bool = True,
    ) -> None:
        """The commit of the staged ``batch`` is done (the mutex is held): each put it
        ``stored`` (every one, without ``stored``) is ready or delayed, with its pickle kept
        if ``cache``; the others take no place any more. Gets waiting for puts wake."""
        kept = batch if stored is None else [s for s, ok in zip(batch, stored, strict=True) if ok]
        supply, n, lost = self._supply, len(batch), len(batch) - len(kept)
        if in_tx:
            supply.tx_staged -= n
            self._tasks.added_locked(len(kept))
        else:
            supply.staged -= n
            if lost:
                self._tasks.finished_locked(lost)
        for staged in kept:
            supply.land_staged_locked(staged, cache=cache)
        self._meter.put_locked(len(kept))
        notify_waiting(self._signals.landed, None)
        if lost:
            self._signals.not_full.notify(lost)

    def unstaged_locked(self, n: int, in_tx: bool, counted: bool = True) -> None:
        """``n`` staged puts will not land (their commit failed or was undone; the mutex is
        held): their places are free, and outside a transaction, if ``counted``, they no
        longer count for ``join``."""
        if in_tx:
            self._supply.tx_staged -= n
        else:
            self._supply.staged -= n
            if counted:
                self._tasks.finished_locked(n)
        notify_waiting(self._signals.landed, None)
        if n:
            self._signals.not_full.notify(n)

    def put_many(
        self,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        group: str | None = None,
    ) -> None:
        if self._put_in_open_transaction(items, block, timeout, priority, due, group):
            return
        if items:
            self._commit(self.stage_batch(items, block, timeout, priority, due, False, group))

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
        mutex = self._signals.mutex

        def land() -> None:
            with mutex:
                self.landed_locked(batch, in_tx=True)

        def drop() -> None:
            with mutex:
                self.unstaged_locked(len(batch), in_tx=True)

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
        datas = [self._book.codec.encode(item) for item in items]
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
