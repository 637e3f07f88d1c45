"""Claiming and staging: how an item leaves the ready index and how a put waits to land.

``_claim_next`` runs the standard library's blocking ``get`` (whose ``_get`` hook claims the
first ready key) and gives the claim back if anything fails before the caller has it; ``_stage``
and ``_unstage`` pickle and key a put, and undo one whose commit failed. Keys that come back
(nacks, releases, failed gets) go through ``_make_ready_locked``; keys that become ready without
having been held here (puts landing, delays falling due, dead letters requeued) go through
``_offer_locked``; keys that leave for good go through ``_forget_locked``, which also settles
``join()``'s count.
"""

from __future__ import annotations

import queue
import time
from typing import TYPE_CHECKING, Any

from ackqueue.delivery.claims import Claim, GetAgain, Staged, pickle_item
from ackqueue.delivery.shutdown import calling_stdlib
from ackqueue.errors import AckQueueError, Empty, ItemLoadError

if TYPE_CHECKING:
    from ackqueue.delivery.holds import HoldTable


class ClaimingMixin:
    def _claim_next(
        self: Any, block: bool, timeout: float | None, table: HoldTable | None = None
    ) -> Claim:
        """Claim the next ready item; ``table`` is the consumer getting it, if any: closing
        that consumer wakes this wait with QueueClosedError (see ``_check_getter_locked``)."""
        self._tls.getter = table
        try:
            return self._claim_next_for(block, timeout)
        finally:
            self._tls.getter = None

    def _claim_next_for(self: Any, block: bool, timeout: float | None) -> Claim:
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        self._tls.deadline = time.monotonic() if not block else deadline
        while True:
            self._tls.claim = None
            self._tls.unloadable = None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                # Neither GetAgain nor ItemLoadError leaves a claim: undoing first changes nothing.
                with calling_stdlib(self._tls, "get", undo=self._give_back_claim):
                    item = queue.Queue.get(self, block, remaining)
            except GetAgain:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    raise Empty from None
                continue
            except ItemLoadError as exc:
                raise self._bury_unloadable(exc) from exc
            claim = self._tls.claim
            self._tls.claim = None
            if claim is None:
                raise AckQueueError("a subclass's _get did not call AckQueue._get")
            claim.item = item
            return claim

    def _getter_closed_locked(self: Any) -> bool:
        """Whether the consumer this thread is getting for was closed while it waited."""
        table = getattr(self._tls, "getter", None)
        return table is not None and table.closed

    def _give_back_claim(self: Any) -> None:
        """Give back what this thread's ``_get`` claimed, if anything (its get failed after)."""
        claim = self._tls.claim
        if claim is not None:
            self._unclaim(claim.key)

    def _unclaim(self: Any, key: Any) -> None:
        with self.mutex:
            self._unclaim_locked(key)

    def _unclaim_locked(self: Any, key: Any) -> None:
        self._make_ready_locked(key)

    def _make_ready_locked(self: Any, key: Any) -> None:
        if self._drained:
            return  # an immediate shutdown: it stays stored for the next start
        self._ready.push(key)
        self.not_empty.notify()

    def _offer_locked(self: Any, key: Any) -> None:
        if self._drained:
            return
        self._ready.offer(key)
        self.not_empty.notify()

    def _forget(self: Any, key: Any) -> None:
        with self.mutex:
            self._forget_locked(key)

    def _forget_locked(self: Any, key: Any, finished: int = 0) -> None:
        self._session_attempts.pop(self._key_id(key), None)
        if finished:
            self._task_finished_locked(finished)

    def _task_finished_locked(self: Any, n: int) -> None:
        """``task_done`` for ``n`` items that left the queue for good (acked, dead-lettered)."""
        if not n:
            return
        self.unfinished_tasks = max(0, self.unfinished_tasks - n)
        if self.unfinished_tasks == 0:
            self.all_tasks_done.notify_all()

    def _stage(self: Any, item: Any, priority: int) -> Staged:
        data = pickle_item(item)
        seq = self._alloc_seq()
        return Staged(self._make_key(seq, priority, item), seq, data)

    def _unstage(self: Any, counted: bool, staged: Staged | None = None) -> None:
        staged = staged or self._tls.staged
        self._tls.staged = None
        if staged is None:
            return
        with self.mutex:
            self._staged -= 1
            if counted:
                self.unfinished_tasks -= 1
            self._landed.notify_all()
            self.not_full.notify()
