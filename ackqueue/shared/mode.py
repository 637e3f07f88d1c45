"""Shared mode: one queue used by several processes at once, through ZEO (or RelStorage).

In a single process, holds live in memory and a get commits nothing. When other processes use
the same queue, a hold must be visible to them, so in shared mode:

* a consumer get commits a *hold*: the entry is marked with this process's session id and a
  delivery token (and listed under the session, so a reaper finds it); every process skips
  held entries. Two processes taking the same entry conflict on it, and the loser takes the
  next one (a ConflictError never reaches the caller: the group committer retries, and the
  retried take finds the entry held);
* ack, nack, reject and extend check inside their commit that the hold is still this
  session's with this token (fencing): a process that was stopped past its session lease gets
  :class:`~ackqueue.LeaseExpiredError` and changes nothing;
* giving an item back (nack, consumer closed, thread ended, ``ack_timeout``) clears the hold,
  so the item is ready again in place for every process; a dead process's holds are cleared by
  whoever reaps its session (:mod:`ackqueue.sessions`);
* the ready order comes from the stored tree, read after a sync (:class:`SharedReadyIndex`),
  instead of the in-memory index that assumes one process;
* sequence numbers come from blocks reserved in the shared queue record.

Ordering across processes is documented in README.rst ("Scaling out").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ackqueue.base.keyids import KeyMap, KeySet
from ackqueue.delivery.claims import Claim, GetAgain
from ackqueue.delivery.deadletters import bury
from ackqueue.delivery.holds import Hold, HoldTable
from ackqueue.errors import LeaseExpiredError, NotHeldError
from ackqueue.shared import sessions
from ackqueue.shared.holdmarks import HOLDS_KEY, HoldValue, clear_hold, holder, set_hold
from ackqueue.shared.ready import SharedReadyIndex, reading
from ackqueue.shared.sessions import SessionLost
from ackqueue.storage.transactions import current

if TYPE_CHECKING:
    from ackqueue.queue.queues import AckQueue

# A process numbers its puts from a block of sequence numbers reserved in the shared record,
# used for at most SEQ_BLOCK puts or SEQ_BLOCK_SECONDS, whichever ends first, so that items put
# by different processes at about the same time stay close to put order.
SEQ_BLOCK = 64
SEQ_BLOCK_SECONDS = 1.0

def wants_shared(db: Any, shared: bool | None) -> bool:
    if shared is not None:
        return shared
    from ackqueue.storage.uri import is_shared_storage

    return is_shared_storage(db.storage)


class SharedQueue:
    """The shared-mode state of one queue in this process."""

    def __init__(self, queue: AckQueue, session_timeout: float) -> None:
        self.q = queue
        self.name = queue.name
        self.store = queue._store
        self.session = sessions.acquire(self.store, session_timeout)
        self.mine: KeyMap[HoldValue] = KeyMap(queue._key_id)  # keys held here, and how
        self.taking = KeySet(queue._key_id)  # keys claimed here whose hold is being committed
        self._block_next = 0
        self._block_end = 0
        self._block_until = 0.0
        self.session.add_queue(self)

    def reader_hold_count(self) -> int:
        holds_by_session = self.q._reader.root().get(HOLDS_KEY, {})
        return sum(len(mine) for mine in holds_by_session.values())

    # -- sequence numbers ---------------------------------------------------------------------

    def next_seq(self) -> int:
        """The next sequence number for a put (the caller holds the queue's mutex)."""
        if self._block_next >= self._block_end or time.monotonic() > self._block_until:
            record = self.q._wrec

            def reserve() -> int:
                start: int = record.seq_reserved
                record.seq_reserved = start + SEQ_BLOCK
                return start

            start = self.store.run(reserve)
            self._block_next, self._block_end = start, start + SEQ_BLOCK
            self._block_until = time.monotonic() + SEQ_BLOCK_SECONDS
        seq = self._block_next
        self._block_next += 1
        return seq

    # -- taking holds -------------------------------------------------------------------------

    def take(self, claims: list[Claim], remove: bool = False) -> list[Claim]:
        """Commit a hold on each claimed key (or, with ``remove``, delete the entry at once).

        Returns the claims that are now this process's; claims another process got first are
        dropped, and those out of attempts go to the dead letters.
        """
        q = self.q
        with q.mutex:
            for claim in claims:
                claim.delivery_id = next(q._delivery_ids)
        record, limit, reason = q._wrec, q.max_attempts, q._exhausted_reason()
        session, root, name = self.session, self.store.root, self.name

        def take() -> list[tuple[int | None, HoldValue | None] | None]:
            sid = session.check_live()
            now = q._clock()
            results: list[tuple[int | None, HoldValue | None] | None] = []
            for claim in claims:
                entry = record.entries.get(claim.key)
                if entry is None or holder(entry) is not None:
                    results.append(None)  # another process got it first
                elif remove:
                    entry._p_changed = True  # conflicts with a take racing it: see set_hold
                    q._remove_entry(record, claim.key)
                    results.append((entry.attempts, None))
                elif limit is not None and entry.attempts >= limit:
                    bury(record, claim.key, reason, now, entry.attempts)
                    results.append((None, None))
                else:
                    entry.attempts += 1
                    value = (sid, int(claim.delivery_id or 0))
                    set_hold(root(), name, claim.key, entry, value)
                    results.append((entry.attempts, value))
            return results

        try:
            try:
                results = self.store.run(take)
            except SessionLost as reaped:
                # Our session lapsed (this process was stopped or cut off): what it held is
                # void, but new work may go on under a new session.
                self.session.start_over(reaped.sid)
                results = self.store.run(take)
        except BaseException:
            # The hold may or may not have been committed: release it (fenced by its token)
            # rather than hand the key out again from here.
            with q.mutex:
                for claim in claims:
                    self.taking.discard(claim.key)
                    value = (self.session.sid, int(claim.delivery_id or 0))
                    self.session.release_later(self.name, claim.key, value)
                with contextlib.suppress(Exception):
                    self.refresh_locked()
            raise
        kept = []
        with q.mutex:
            lost = False
            for claim, result in zip(claims, results, strict=True):
                self.taking.discard(claim.key)
                if result is None:
                    lost = True
                    continue
                attempts, held_as = result
                if attempts is None:
                    q._forget_locked(claim.key, finished=1)
                    continue
                claim.attempts = attempts
                if held_as is not None:
                    self.mine[claim.key] = held_as
                kept.append(claim)
            if lost:
                self.refresh_locked()
                if isinstance(q._ready, SharedReadyIndex):
                    q._ready.lost_race()
        return kept

    # -- settling: fencing and deleting holds -------------------------------------------------

    def fence(self, holds: list[Hold]) -> Callable[[], None]:
        """A check (inside the commit) that every hold is still this session's, same token."""
        expected = [(hold.key, self.mine.get(hold.key), hold.delivery.id) for hold in holds]
        name, record = self.name, self.q._wrec

        def check() -> None:
            for key, value, token in expected:
                entry = record.entries.get(key)
                if value is None or value[1] != token or entry is None or holder(entry) != value:
                    if entry is None:
                        raise NotHeldError(
                            f"this item of queue {name!r} is no longer stored: it was acked "
                            "already (by an earlier try whose commit outcome was lost with the "
                            "connection, or by another consumer after this one lost its hold)"
                        )
                    raise LeaseExpiredError(
                        f"the hold on this item of queue {name!r} was lost (this process was "
                        "stopped or cut off longer than its session lease, and the item went "
                        "back to the queue and may have been delivered to another consumer); "
                        "nothing was changed"
                    )

        return check

    def unhold(self, keys: list[Any]) -> Callable[[], None]:
        root, name = self.store.root, self.name

        def unhold() -> None:
            for key in keys:
                clear_hold(root(), name, key)

        return unhold

    def settled_locked(self, keys: list[Any]) -> None:
        for key in keys:
            self.mine.pop(key)

    def release_if_mine_locked(self, key: Any) -> bool:
        """A held key goes back to the queue: delete its hold soon (the caller holds the mutex).

        The release commits on the session thread, because this runs where committing is not
        allowed (with the mutex held); the key is ready for every process once it has.
        """
        value = self.mine.pop(key)
        if value is None:
            return False
        self.session.release_later(self.name, key, value)
        return True

    # -- what the session thread calls --------------------------------------------------------

    def refresh(self) -> None:
        q = self.q
        if getattr(q, "_timers", None) is None:
            return  # the queue is still being opened (its __init__ reads without the mutex)
        with q.mutex:
            if q._closed:
                return
            self.refresh_locked()
            if len(q._ready):
                q.not_empty.notify_all()
            if q.maxsize > 0:
                q.not_full.notify_all()

    def refresh_locked(self) -> None:
        index = self.q._ready
        if isinstance(index, SharedReadyIndex):
            index.refresh()

    def session_lost(self) -> None:
        """Our session was reaped: every hold we had is void; late acks raise
        LeaseExpiredError."""
        q = self.q
        with q.mutex:
            for table in list(q._tables):
                for hold in list(table.by_id.values()):
                    if hold.key in self.mine and not hold.settling:
                        table.remove(hold)
                        table.expired.append(hold)
                        q._end_lease_locked(hold)
                        q._held -= 1
            self.mine.clear()
            self.refresh_locked()

    def close(self) -> None:
        """Give back this queue's holds (one commit) and stop using the session."""
        self.session.remove_queue(self)
        with self.q.mutex:
            values = list(self.mine.items())
            self.mine.clear()
        root, name = self.store.root, self.name

        def give_back() -> None:
            for key, value in values:
                clear_hold(root(), name, key, value)

        try:
            if values:
                self.store.run(give_back)
        finally:
            sessions.release(self.session)


class SharedMixin:
    """The queue hooks that behave differently in shared mode (``self._shared`` is set)."""

    @property
    def shared(self: Any) -> bool:
        """True when other processes may use this queue too (its holds are stored)."""
        return self._shared is not None

    def _open_shared(self: Any, shared: bool | None, session_timeout: float) -> None:
        if not session_timeout > 0:
            raise ValueError("session_timeout must be a positive number of seconds")
        self._shared = None
        if wants_shared(self._store.db, shared):
            self._shared = SharedQueue(self, session_timeout)

    def _new_ready_index(self: Any, backlog: int) -> Any:
        if self._shared is None:
            return super()._new_ready_index(backlog)  # type: ignore[misc]
        return SharedReadyIndex(self._shared, self)

    def _extend(self: Any, table: HoldTable, hold: Hold, seconds: float) -> None:
        super()._extend(table, hold, seconds)  # type: ignore[misc]
        if self._shared is not None:
            self._store.run(self._shared.fence([hold]))

    def _load(self: Any, key: Any) -> tuple[bytes, int]:
        if self._shared is None:
            return super()._load(key)  # type: ignore[misc]
        try:
            with reading(self._store.where):
                return super()._load(key)  # type: ignore[misc]
        except KeyError:
            # Another process took and settled it since our snapshot: move on to the next.
            self._ready.vanished.add(key)
            self._ready.refresh()
            raise GetAgain from None

    def _count_attempts(self: Any, claims: list[Claim]) -> list[Claim]:
        if self._shared is None:
            return super()._count_attempts(claims)  # type: ignore[misc]
        return self._shared.take(claims)

    def _settlement(
        self: Any, plan: list[tuple[Hold, str]], due: float, reason: str | None, now: float
    ) -> tuple[Callable[[], None] | None, Callable[[], None]]:
        edit, check = super()._settlement(plan, due, reason, now)  # type: ignore[misc]
        if self._shared is None:
            return edit, check
        fence = self._shared.fence([hold for hold, _ in plan])
        unhold = self._shared.unhold([hold.key for hold, _ in plan])

        def fenced_check() -> None:
            fence()
            check()

        def edit_and_unhold() -> None:
            unhold()  # first: it writes the entries, which the edit may delete
            if edit is not None:
                edit()

        return edit_and_unhold, fenced_check

    def _finish_settle(
        self: Any, table: HoldTable, plan: list[tuple[Hold, str]], due: float
    ) -> None:
        if self._shared is not None:
            with self.mutex:
                self._shared.settled_locked([hold.key for hold, _ in plan])
        super()._finish_settle(table, plan, due)  # type: ignore[misc]

    def _shared_get(self: Any, block: bool, timeout: float | None) -> Any:
        """Plain ``get`` in shared mode: take the entry away in one commit (or, inside a
        transaction, hold it now and delete it with the transaction)."""
        tx = current(self._store)
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            claim = self._claim_next(block, remaining)
            kept = self._shared.take([claim], remove=tx is None)
            if not kept:
                continue
            if tx is None:
                with self.mutex:
                    self._forget_locked(claim.key)
                return claim.item
            table = HoldTable(owner="get")
            self._hold(table, kept)
            hold = table.by_id[claim.delivery_id]
            hold.settling = True
            self._settle(table, [hold], "ack")
            with self.mutex:  # a plain get is no ack: the caller calls task_done
                self.unfinished_tasks += 1
            return claim.item

    def _close_shared(self: Any) -> None:
        if self._shared is not None:
            self._shared.close()


__all__ = ["SessionLost", "SharedMixin", "SharedQueue", "SharedReadyIndex", "wants_shared"]
