"""Batches: ``q.put_many``, ``c.get_many``, ``c.ack_many``, each one commit (or none).

A batch costs one commit (and one fsync) however many items it carries, which is what makes
tens of thousands of items per second possible on a FileStorage. ``get_many`` commits nothing
unless ``max_attempts`` is set, like ``get``. Transactional puts (inside ``transaction()``)
share this path too: they are staged now and land when the transaction commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ackqueue.base.interrupts import Shield, checkpoint, hold_back
from ackqueue.delivery.claims import Claim, Staged, pickle_item, unpickle_item
from ackqueue.errors import Full, ItemLoadError

if TYPE_CHECKING:
    from ackqueue.delivery.holds import HoldTable
    from ackqueue.storage.transactions import Transaction


class BatchMixin:
    def put_many(
        self: Any,
        items: Iterable[Any],
        block: bool = True,
        timeout: float | None = None,
        *,
        priority: int = 0,
        delay: float | None = None,
        not_before: float | None = None,
    ) -> None:
        """Put every item in one commit; return once all are durable (or none is stored).

        With ``maxsize``, waits until the whole batch fits (a batch larger than ``maxsize``
        is a ``ValueError``); ``block`` and ``timeout`` are as for :meth:`put`.
        """
        items = list(items)
        self._check_priority(priority)
        due = self._due_time(delay, not_before)
        with Shield():
            self._put_many_shielded(items, block, timeout, priority, due)

    def _put_many_shielded(
        self: Any, items: list[Any], block: bool, timeout: float | None, priority: int, due: float
    ) -> None:
        tx = self._current_transaction()
        if tx is not None:
            self._put_in_transaction(tx, items, block, timeout, priority, due)
            return
        if not items:
            return
        batch = self._stage_batch(items, block, timeout, priority, due, in_tx=False)
        try:
            self._store.run(self._inserter(batch))
        except BaseException:
            with self.mutex:
                self._staged -= len(batch)
                self.unfinished_tasks -= len(batch)
                self._landed.notify_all()
                self.not_full.notify(len(batch))
            raise
        with self.mutex:
            self._staged -= len(batch)
            for staged in batch:
                self._land_locked(staged)
            self._landed.notify_all()

    def _put_in_transaction(
        self: Any,
        tx: Transaction,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
    ) -> None:
        if not items:
            return
        batch = self._stage_batch(items, block, timeout, priority, due, in_tx=True)

        def land() -> None:
            with self.mutex:
                self._tx_staged -= len(batch)
                self.unfinished_tasks += len(batch)
                for staged in batch:
                    self._land_locked(staged)

        def drop() -> None:
            with self.mutex:
                self._tx_staged -= len(batch)
                self.not_full.notify(len(batch))

        tx.add(self._inserter(batch), after_commit=land, undo=drop)

    def _stage_batch(
        self: Any,
        items: list[Any],
        block: bool,
        timeout: float | None,
        priority: int,
        due: float,
        in_tx: bool,
    ) -> list[Staged]:
        """Pickle and key ``items`` once there is room for all of them."""
        datas = [pickle_item(item) for item in items]
        n = len(items)
        if self.maxsize > 0 and n > self.maxsize:
            raise ValueError(f"a batch of {n} items can never fit in maxsize {self.maxsize}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.not_full:
            while True:
                self._check_can_put()
                waiting = len(self._ready) + self._staged + self._tx_staged
                if self.maxsize <= 0 or waiting + n <= self.maxsize:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise Full
                checkpoint(self._wake_waits)
                self.not_full.wait(remaining)
            hold_back()  # the batch takes its places now: see interrupts.py
            batch = []
            for item, data in zip(items, datas, strict=True):
                seq = self._alloc_seq()
                batch.append(Staged(self._make_key(seq, priority, item), seq, data, due))
            if in_tx:
                self._tx_staged += n
            else:
                self._staged += n
                self.unfinished_tasks += n
                self.not_empty.notify(n)
        return batch

    def _hold_many(
        self: Any, table: HoldTable, n: int, block: bool, timeout: float | None
    ) -> list[Any]:
        """Up to ``n`` items held for ``table``: waits like ``get`` for the first one only."""
        if n < 1:
            raise ValueError(f"get_many needs n >= 1, not {n!r}")
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            with Shield():  # one per round, as in _hold_next
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                claims = [self._claim_next(block, remaining, table)]
                if n > 1:
                    claims += self._claim_ready(n - 1)
                kept = self._count_attempts(claims)
                dropped = len(claims) - len(kept)
                while dropped and len(kept) < n:  # some went to the dead letters: fill up
                    more = self._claim_ready(n - len(kept))
                    if not more:
                        break
                    counted = self._count_attempts(more)
                    dropped = len(more) - len(counted)
                    kept += counted
                if kept:
                    return self._hold(table, kept)

    def _claim_ready(self: Any, limit: int) -> list[Claim]:
        """Claim up to ``limit`` items that are ready now, without waiting."""
        claims: list[Claim] = []
        unloadable: list[tuple[Any, ItemLoadError]] = []
        failure: ItemLoadError
        hold_back()  # called with an item already claimed; these claims belong to it too
        with self.mutex:
            while len(claims) < limit and len(self._ready) and not self._closed:
                if self._drained:
                    break
                key = self._ready.pop()
                try:
                    data, attempts = self._load(key)
                    item = unpickle_item(data, f"item {key!r} of queue {self.name!r}")
                except ItemLoadError as load_error:
                    unloadable.append((key, load_error))
                    continue
                except BaseException:
                    self._ready.push(key)
                    break
                claims.append(Claim(key, item, attempts))
            if claims:
                self.not_full.notify(len(claims))
        try:
            for key, failure in unloadable:
                self._tls.unloadable = (key, failure)
                self._bury_unloadable(failure)
        except BaseException:
            with self.mutex:
                for claim in claims:
                    self._unclaim_locked(claim.key)
            raise
        return claims
