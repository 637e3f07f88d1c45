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
  whoever reaps its session (:mod:`ackqueue.shared.sessions`);
* the ready order comes from the stored tree, read after a sync (:class:`SharedReadyIndex`),
  instead of the in-memory index that assumes one process;
* sequence numbers come from blocks reserved in the shared queue record (:class:`SeqBlocks`).

Ordering across processes is documented in docs/howto/scaling.rst.

Sequence numbers (:class:`SeqBlocks`): several processes put into one queue, so none may count
on from a number only it knows: each reserves a block of numbers in the stored record (one
commit) and numbers its puts from it, for at most :data:`SEQ_BLOCK` puts or
:data:`SEQ_BLOCK_SECONDS`, whichever ends first, so that items put by different processes at
about the same time stay close to put order.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from ackqueue.base.clock import Clock, durations_clock
from ackqueue.base.keyids import KeyMap, KeySet
from ackqueue.base.timers import Timers
from ackqueue.delivery.conditions import Lifecycle, Signals
from ackqueue.delivery.groups import GroupedReadyIndex, GroupRules, Schedule
from ackqueue.delivery.holds import Hold
from ackqueue.delivery.mode import (
    ClaimReady,
    Edit,
    Load,
    NextId,
    NoRides,
    Ride,
    Rides,
    Taken,
    Void,
    exhausted_reason,
)
from ackqueue.delivery.ordering import Ordering, checked_seq
from ackqueue.delivery.ready import ReadyKeys, ScanAfter
from ackqueue.delivery.supply import Claim, GetAgain, Supply
from ackqueue.errors import StorageError
from ackqueue.records import SHARD_SEQS, QueueRecord
from ackqueue.shared import sessions
from ackqueue.shared.groupgate import GroupGate
from ackqueue.shared.holdmarks import (
    HOLDS_KEY,
    HoldValue,
    clear_hold,
    fencer,
    held_in_queue,
    live_hold_in,
    live_holder,
    set_hold,
    unholder,
)
from ackqueue.shared.ready import SharedReadyIndex, reading
from ackqueue.shared.riding import AckRides
from ackqueue.shared.sessions import SESSIONS_KEY, SessionLost
from ackqueue.storage.book import (
    Book,
    Keeping,
    group_pause_raiser,
    group_pause_restorer,
    group_remover,
)
from ackqueue.storage.counts import count_change, settle
from ackqueue.storage.keys import release
from ackqueue.storage.transactions import current

log = logging.getLogger("ackqueue")

# The outcome of taking one claim: None (another process got it first), "stopped" (its group may
# not deliver now), or the attempts so far (None: buried) with its stored hold (None: removed).
# How long a shared remove_group pauses its group at most (see SharedMode.remove_group).
REMOVAL_PAUSE = 60.0

# A take's outcome for one claim: (attempts, hold) taken, (None, None) buried, None lost to
# another process, "stopped" not deliverable now (delayed, its group's rules, replaced),
# "paused" the whole queue is (q.pause() of another process, committed first).
TakeResult = tuple[int | None, HoldValue | None] | Literal["stopped", "paused"] | None


class ManyWriters:
    """How a book is kept when several processes write it: the count lives in the record's
    ``Length`` (other processes read it), and an acked entry is only marked done; the sweeper
    (:mod:`ackqueue.shared.sweeping`) deletes done entries in batches.

    Deleting the first key of a bucket conflicts with every concurrent change to that bucket,
    and emptying a bucket with every change below the same tree node: with several processes
    acking at the head, most acks did one or the other. Marking writes only the entry, which no
    other process changes at the same time. So each new entry is a record of its own (an
    inline entry that a process working alone stored becomes one when first marked).
    """

    own_records = True

    def opened(self, book: Book, record: QueueRecord) -> None:
        settle(record, book.store.db.storage)
        if not record.done_marks:  # unchanged records are not written
            record.done_marks = True
        record.mark_shared()

    def retire(self, book: Book, key: Any) -> None:
        record = book.record
        if record.keyed is not None:
            release(record, key, record.entry_at(key), book.clock())
        record.change_entry(key, done=True, data=b"")  # the item is garbage: a small record
        count_change(record, -1)


class SharedMode:
    """The shared-mode state of one queue in this process."""

    keeping: Keeping = ManyWriters()

    def __init__(
        self,
        book: Book,
        ordering: Ordering,
        signals: Signals,
        lifecycle: Lifecycle,
        clock: Clock,
        max_attempts: int | None,
        session_timeout: float,
        rules: GroupRules | None = None,
    ) -> None:
        self._book = book
        self._store = book.store
        self._order = ordering
        self._signals = signals
        self._life = lifecycle
        self._clock = clock
        self._max_attempts = max_attempts
        self._index: SharedReadyIndex | None = None
        self._gate = GroupGate(rules or GroupRules(), book.name)
        self.mine: KeyMap[HoldValue] = KeyMap(ordering.key_id)  # keys held here, and how
        self.taking = KeySet(ordering.key_id)  # keys claimed here whose hold is committing
        self._void: Void | None = None
        self._seqs = SeqBlocks(book)
        self.session = sessions.acquire(self._store, session_timeout)
        self.session.add_queue(self)

    @property
    def shared(self) -> bool:
        return True

    @property
    def name(self) -> str:
        return self._book.name

    @property
    def sid(self) -> str:
        """This process's session id (the stripe of keys it takes first depends on it)."""
        return self.session.sid

    def reader_hold_count(self) -> int:
        return held_in_queue(self._book.read_root().get(HOLDS_KEY), self.name)

    def next_seq_locked(self) -> int:
        return self._seqs.next_locked()

    @property
    def takes_commit_nothing(self) -> bool:
        return False  # a hold is stored, for every process to see

    @property
    def entries_stay_as_put(self) -> bool:
        return False  # another process may replace a waiting item's payload by key

    @property
    def stored_holds(self) -> SharedMode:
        return self

    @property
    def indexing(self) -> SharedMode:
        return self

    def open_index(
        self, book: Book, backlog: int, scan_after: ScanAfter, schedule: Schedule
    ) -> tuple[ReadyKeys, GroupedReadyIndex | None]:
        """The ready order read from the stored tree, groups included (see groupgate.py)."""
        self._index = SharedReadyIndex(
            self, self._book, self._clock, self._order, self._gate.stopped
        )
        return self._index, None

    def group_index(self, plain: ReadyKeys, schedule: Schedule) -> None:
        return None  # the stored tree says each entry's group: nothing to learn in memory

    def remove_group(self, group: str, supply: Supply) -> int:
        """Remove what no process holds, in the stored tree the ready index reads.

        The removal writes every waiting entry of the group, so that a take racing it
        conflicts; with consumers taking from a big group, such a commit conflicted again and
        again until it gave up (a review: 2 runs of 3 with 1,000 items). So the group is
        paused first, in a small commit of its own (no take starts on it then), and its pause
        put back as it was after (unless another process paused it meanwhile); a process
        killed in between leaves it paused for :data:`REMOVAL_PAUSE` seconds at most.

        An entry held under a session no longer listed is removed: its hold is void, as a
        get sees it (:func:`~ackqueue.shared.holdmarks.live_holder`). If the removal fails,
        its error is raised, and a failure to put the pause back is only logged; if only
        putting the pause back fails, that error is raised (the removal is committed)."""
        store, book = self._store, self._book
        until = self._clock() + REMOVAL_PAUSE
        found = store.run(group_pause_raiser(book, group, until))
        paused_here = found is None or found < until
        resume = group_pause_restorer(book, group, until, found)  # as it was
        try:
            removed = int(store.run(group_remover(book, group, live_hold_in(store.root))))
        except BaseException:
            if paused_here:
                try:
                    store.run(resume)
                except Exception:
                    # The removal's error is the one the caller must see.
                    log.warning(
                        "ackqueue: cannot resume group %r of queue %r after its removal "
                        "failed; it stays paused for up to %ss",
                        group, self.name, REMOVAL_PAUSE, exc_info=True,
                    )
            raise
        if paused_here:
            store.run(resume)
        return removed

    def load(self, key: Any, load: Load) -> tuple[bytes, int]:
        try:
            with reading(self._store.where):
                return load(key)
        except KeyError:
            # Another process took and settled it since our snapshot: move on to the next.
            index = self._require_index()
            index.vanished.add(key)
            index.refresh()
            raise GetAgain from None

    def _require_index(self) -> SharedReadyIndex:
        assert self._index is not None, "the ready index is made when the queue opens"
        return self._index

    # -- taking holds -------------------------------------------------------------------------

    def take(self, claims: list[Claim], supply: Supply) -> Taken:
        return self._take(claims, remove=False)

    def take_away(self, claim: Claim, supply: Supply) -> Taken:
        tx = current(self._store)
        taken = self._take([claim], remove=tx is None)
        if not taken.kept:
            return taken
        if tx is not None:
            key, value = claim.key, self.mine.get(claim.key)
            token = int(claim.delivery_id or 0)
            unhold = self._unhold([key])

            def edit() -> None:
                unhold()
                self._book.retire_entry(key)

            def settled() -> None:
                with self._signals.mutex:
                    self.mine.pop(key)

            def undo() -> None:
                with self._signals.mutex:
                    supply.make_ready_locked(key)  # gives our hold back (SharedReadyIndex.push)

            tx.add(edit, check=self._fence([(key, value, token)]), after_commit=settled, undo=undo)
        return taken

    def _take(self, claims: list[Claim], remove: bool) -> Taken:
        """Commit a hold on each claimed key (or, with ``remove``, delete the entry at once)."""
        take = self._take_change(claims, remove)
        try:
            try:
                results = self._store.run(take)
            except SessionLost as reaped:
                # Our session lapsed (this process was stopped or cut off): what it held is
                # void, but new work may go on under a new session.
                self.session.start_over(reaped.sid)
                results = self._store.run(take)
        except BaseException:
            self._untake(claims)
            raise
        return self._sort_taken(claims, results)

    def rides(
        self, supply: Supply, timers: Timers, claim_ready: ClaimReady, next_id: NextId
    ) -> Rides:
        """Not with ``max_attempts`` (a ride counts a delivery, which an unused ride would
        waste), nor with a manual clock (whose time moves only when a test moves it)."""
        if self._max_attempts is not None or getattr(self._clock, "manual", False):
            return NoRides()
        return AckRides(
            self._signals, self._life, supply, durations_clock(self._clock), timers, claim_ready,
            next_id,
            self.ride,
        )

    def ride(self, claims: list[Claim]) -> Ride:
        """Holds on ``claims`` committed with someone else's change (an ack): see Ride."""
        take = self._take_change(claims, False)
        results: list[list[TakeResult]] = [[None] * len(claims)]

        def edit() -> None:
            try:
                results[0] = take()
            except SessionLost:  # raised before the take wrote anything: the ack goes on
                results[0] = [None] * len(claims)

        return Ride(
            edit=edit,
            landed=lambda: self._sort_taken(claims, results[0]),
            failed=lambda: self._untake(claims),
        )

    def _take_change(self, claims: list[Claim], remove: bool) -> Callable[[], list[TakeResult]]:
        record, limit = self._book.record, self._max_attempts
        reason = exhausted_reason(limit)
        session, root, name, gate = self.session, self._store.root, self.name, self._gate

        def take() -> list[TakeResult]:
            sid = session.check_live(consuming=name)
            now = self._clock()
            if record.queue_paused(current=True):
                # Read as current: a pause another process commits before this take conflicts
                # with it, which then finds it here (nothing handed out after pause() returned).
                return ["paused"] * len(claims)
            results: list[TakeResult] = []
            admit = gate.admitter(record, root(), now)
            sessions = root().get(SESSIONS_KEY)
            for claim in claims:
                entry = record.entry(claim.key)
                if entry is not None and not entry.done:
                    record.vouch(claim.key, entry)
                if entry is None or entry.done or live_holder(entry, sessions) is not None:
                    results.append(None)  # another process got it first
                elif (entry.not_before > now or not admit(entry)
                      or (claim.data is not None and entry.data != claim.data)):
                    # Given back with a delay since our look found it ready (another process
                    # took it and nacked it so), or its group may not deliver now, or its
                    # payload was replaced since we loaded it (a put by key, replace=True):
                    # handed out, the stale one would be acked in place of the new.
                    results.append("stopped")
                elif remove:
                    self._book.retire_entry(claim.key)  # writes the entry: a racing take conflicts
                    results.append((entry.attempts, None))
                elif limit is not None and entry.attempts >= limit:
                    self._book.bury(claim.key, reason, now, entry.attempts)
                    results.append((None, None))
                else:
                    attempts = entry.attempts + 1
                    value = (sid, int(claim.delivery_id or 0))
                    set_hold(root(), name, claim.key, value, attempts)
                    results.append((attempts, value))
            return results

        return take

    def _untake(self, claims: list[Claim]) -> None:
        """A take's commit failed: its holds may or may not have been committed. Release them
        (fenced by their tokens) rather than hand the keys out again from here."""
        with self._signals.mutex:
            for claim in claims:
                self.taking.discard(claim.key)
                value = (self.session.sid, int(claim.delivery_id or 0))
                self.session.release_later(self.name, claim.key, value)
            with contextlib.suppress(Exception):
                self._require_index().refresh()

    def _sort_taken(self, claims: list[Claim], results: list[TakeResult]) -> Taken:
        taken = Taken()
        with self._signals.mutex:
            lost = look_again = paused = False
            for claim, result in zip(claims, results, strict=True):
                self.taking.discard(claim.key)
                if result == "paused":
                    paused = look_again = True
                    continue
                if result is None or result == "stopped":
                    lost, look_again = lost or result is None, True
                    continue
                attempts, held_as = result
                if attempts is None:
                    taken.buried.append(claim)
                    continue
                claim.attempts = attempts
                if held_as is not None:
                    self.mine[claim.key] = held_as
                taken.kept.append(claim)
            if look_again:
                index = self._require_index()
                if lost:
                    index.lost_race()
                # The takes are committed: a server gone meanwhile must not fail them now
                # (the watcher looks again once it is back); the next scan skips a stopped group.
                with contextlib.suppress(Exception):
                    index.refresh()
                    if paused:
                        # Known here, maybe before the watcher's refresh: gets wait rather
                        # than take again. Read after the refresh, at the latest commit: a
                        # resume may have committed already (set True here, it would last
                        # until the next commit anywhere).
                        self._life.paused = self._book.paused()
        return taken

    # -- settling: fencing and deleting holds -------------------------------------------------

    def fence(self, holds: list[Hold], edit: Edit | None, check: Edit) -> tuple[Edit | None, Edit]:
        fence = self._fence(
            [(hold.key, self.mine.get(hold.key), hold.delivery.id) for hold in holds]
        )
        unhold = self._unhold([hold.key for hold in holds])

        def fenced_check() -> None:
            fence()
            check()

        def edit_and_unhold() -> None:
            unhold()  # first: it writes the entries, which the edit may delete
            if edit is not None:
                edit()

        return edit_and_unhold, fenced_check

    def _fence(self, expected: list[tuple[Any, HoldValue | None, int]]) -> Edit:
        """A check (inside the commit) that every hold is still this session's, same token."""
        current, root = self.session.sid, self._store.root

        def session_lost(sid: str | None) -> bool:
            record = root().get(SESSIONS_KEY, {}).get(sid or current)
            return record is None or bool(getattr(record, "reaped", False))

        return fencer(self._book.record, self.name, expected, session_lost)

    def _unhold(self, keys: list[Any]) -> Edit:
        return unholder(self._store.root, self.name, keys)

    def settled_locked(self, keys: list[Any]) -> None:
        for key in keys:
            self.mine.pop(key)

    def refund_locked(self, key: Any) -> None:
        pass  # the attempts are stored: the settling edit gave this one back

    def forget_locked(self, key: Any) -> None:
        if self._index is not None:
            self._index.gone(key)

    def check_extend(self, hold: Hold) -> None:
        self._store.run(
            self._fence([(hold.key, self.mine.get(hold.key), hold.delivery.id)])
        )

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
        index = self._index
        if index is None:
            return  # the queue is still being opened
        signals = self._signals
        with signals.mutex:
            if self._life.closed:
                return
            index = self._require_index()  # an immediate shutdown may have made a new one
            index.refresh()
            self._life.paused = self._book.paused()  # another process may have paused it
            if len(index):
                signals.not_empty.notify_all()
                signals.listeners.wake(len(index))
            signals.not_full.notify_all()

    def may_be_void(self, taken_at: float) -> bool:
        return self.session.may_be_void(taken_at)

    def confirm(self) -> None:
        self.session.confirm()

    def session_lost(self) -> None:
        """Our session was reaped: every hold we had is void; late acks raise
        LeaseExpiredError."""
        with self._signals.mutex:
            if self._void is not None:
                self._void(self.mine.__contains__)
            self.mine.clear()
            if self._index is not None:
                self._index.refresh()

    def on_session_lost(self, void: Void) -> None:
        self._void = void

    def flush(self) -> None:
        try:
            self.session.apply_releases()
        except Exception as exc:  # the server is away: the session thread tries again
            log.debug("ackqueue: releases of queue %r deferred: %s", self.name, exc)
            return
        try:
            self.refresh()  # what came back is ready here at once, in its place
        except StorageError as exc:  # the server went away since: the watcher refreshes later
            log.debug("ackqueue: refresh of queue %r deferred: %s", self.name, exc)

    def dropped(self) -> Edit | None:
        # Nothing here may lead back to the queue, or it would never be collected: the session
        # and the stored holds, not this object, which the queue's collaborators hold.
        session, mine, name = self.session, self.mine, self.name

        def give_back() -> None:
            for key, value in list(mine.items()):
                session.release_later(name, key, value)
            mine.clear()
            sessions.release(session)

        return give_back

    def close(self) -> None:
        """Give back this queue's holds and, if the session outlives this queue and no other
        queue of this process has its name, stop counting among the queue's takers (one
        commit), and stop using the session."""
        session = self.session
        last = session.remove_queue(self)
        with self._signals.mutex:
            values = list(self.mine.items())
            self.mine.clear()
        root, name = self._store.root, self.name
        # The last queue's release ends the session, its record with it: nothing to unmark.
        unmark = (
            session.stop_taking_from(name)
            if last and session.took_from(name) and session.refs > 1 else None
        )

        def give_back() -> None:
            for key, value in values:
                clear_hold(root(), name, key, value)
            if unmark is not None:
                unmark()

        try:
            if values:
                self._store.run(give_back)
            elif unmark is not None:
                try:
                    self._store.run(unmark)
                except Exception as exc:
                    # Only the stripes would notice, for a lease at most (renewals unmark it):
                    # never a reason for close() to fail.
                    log.warning("ackqueue: could not unmark session %s as a taker of queue %r:"
                                " %s", session.sid, name, exc)
        finally:
            sessions.release(session)


SEQ_BLOCK = SHARD_SEQS  # a block is one shard of a queue made in shared mode (records.py)
SEQ_BLOCK_SECONDS = 1.0


class SeqBlocks:
    """The block of sequence numbers this process draws from, for one queue."""

    def __init__(self, book: Book) -> None:
        self._book = book
        self._next = 0
        self._end = 0
        self._until = 0.0

    def next_locked(self) -> int:
        """The next number (the caller serialises calls: the queue's mutex)."""
        if self._next >= self._end or time.monotonic() > self._until:
            start = self._book.store.run(self._book.seq_reserver(SEQ_BLOCK))
            self._next, self._end = start, start + SEQ_BLOCK
            self._until = time.monotonic() + SEQ_BLOCK_SECONDS
        seq = self._next
        self._next += 1
        return checked_seq(seq, self._book.name)
