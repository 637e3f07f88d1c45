"""The interface of a queue's mode: one process owning its queue, or several sharing it.

In a single process (:class:`~ackqueue.delivery.local.LocalMode`), holds live in memory and a
consumer get commits nothing unless ``max_attempts`` asks it to count deliveries durably. When
other processes share the database (:class:`~ackqueue.shared.mode.SharedMode`), a hold must be
visible to them: a get commits it, settling checks it is still ours, and the ready order is
read from the stored tree.

The queue chooses the mode once, when it opens (``ackqueue.queue.assembly``), and talks to it
only through this interface: nothing outside the assembly, the modes and the command line asks
which mode it has (``tests/project/test_mode_checks.py``). What differs by mode is the mode's
to say: how the book keeps its count and retires acked entries (its ``keeping``), the
sequence numbers, the ready index (:class:`~ackqueue.delivery.groups.Indexing`), how a
delivery is taken, how a group is removed, whether takes ride an ack's commit
(:class:`Rides`), whether a take commits anything, and what becomes of holds other processes
see (:class:`StoredHolds`, which only shared mode really has).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ackqueue.base.timers import Timers
from ackqueue.delivery.groups import Indexing
from ackqueue.delivery.holds import Hold, HoldTable
from ackqueue.delivery.supply import Claim, Supply

Edit = Callable[[], None]
Load = Callable[[Any], tuple[bytes, int]]
Void = Callable[[Callable[[Any], bool]], None]
ClaimReady = Callable[[int], list[Claim]]
NextId = Callable[[], int]


@dataclass
class Taken:
    """What became of claims handed to :meth:`Mode.take`."""

    kept: list[Claim] = field(default_factory=list)  # now held by this process
    buried: list[Claim] = field(default_factory=list)  # out of attempts: dead letters now


@dataclass
class Ride:
    """Holds taken in the commit of another change (an ack), so that they cost no commit of
    their own: ``edit`` runs inside that change (it may run again after a conflict; it
    raises only the storage's errors); then ``landed`` once it committed, or ``failed``."""

    edit: Callable[[], None]
    landed: Callable[[], Taken]
    failed: Callable[[], None]


class Rides(Protocol):
    """Takes that ride in an ack's commit, for the consumers of one queue in this process
    (see :mod:`ackqueue.shared.riding`); every ``*_locked`` method runs with the mutex held."""

    def board(self, table: HoldTable, n: int) -> Ride | None:
        """Before an ack of ``n`` holds commits: the ride that takes the next ready items for
        ``table`` in the ack's commit, or None. Never raises: the ack must not fail for it."""
        ...

    def landed(self, table: HoldTable, ride: Ride) -> None:
        """The ack committed, and the ride with it: keep what it took for ``table``."""
        ...

    def take_for(self, table: HoldTable, n: int) -> list[Claim]:
        """Up to ``n`` items already held for ``table``, to hand out without a commit."""
        ...

    def drop_locked(self, table: HoldTable) -> None:
        """``table``'s consumer went away: give back what was taken for it."""
        ...


class NoRides:
    """No take rides an ack's commit: in one process a get commits nothing to save, and where
    a get counts its delivery durably (``max_attempts``) a ride left unused would waste one."""

    def board(self, table: HoldTable, n: int) -> None:
        return None

    def landed(self, table: HoldTable, ride: Ride) -> None:
        pass

    def take_for(self, table: HoldTable, n: int) -> list[Claim]:
        return []

    def drop_locked(self, table: HoldTable) -> None:
        pass


class StoredHolds(Protocol):
    """What a mode whose holds are stored, for other processes to see, must do beyond taking
    them: fence a settling against a lapsed session, say when this process's holds became
    void, commit give-backs it deferred, and give back what it holds when the queue goes.
    Only shared mode has stored holds; in one process they live in memory
    (:class:`~ackqueue.delivery.local.HeldInMemory`)."""

    def fence(self, holds: list[Hold], edit: Edit | None, check: Edit) -> tuple[Edit | None, Edit]:
        """Settling ``holds`` with ``edit`` after ``check``: what really commits."""
        ...

    def settled_locked(self, keys: list[Any]) -> None:
        """Those holds were settled and committed."""
        ...

    def check_extend(self, hold: Hold) -> None:
        """A lease is being extended: fail if the hold is no longer ours."""
        ...

    def may_be_void(self, taken_at: float) -> bool:
        """Whether a hold taken at ``taken_at`` (``time.monotonic()``) may have been taken back
        by another process (shared mode: this process's session lapsed or may have): what is
        handed out from a buffer after such a gap must be given back, not worked on."""
        ...

    def confirm(self) -> None:
        """Holds turned out to be maybe void: settle now whether this process's session lives
        (renewing it, or taking a new one if it was reaped), so that holds taken from now on
        are sound and the next ``may_be_void`` is not true of them for the same gap."""
        ...

    def on_session_lost(self, void: Void) -> None:
        """Call ``void(is_void)`` when this process's holds become void (shared mode only)."""
        ...

    def flush(self) -> None:
        """Commit now the give-backs deferred while the mutex was held (a consumer closed)."""
        ...

    def dropped(self) -> Edit | None:
        """What gives back this mode's holds if the queue is collected without ``close()``
        (None: nothing to do). It must not reference the queue, and may commit."""
        ...

    def close(self) -> None:
        """Give back what this process holds and stop."""
        ...


class Mode(Protocol):
    @property
    def shared(self) -> bool:
        """True when other processes may use the queue too (its holds are stored)."""
        ...

    def next_seq_locked(self) -> int:
        """The next sequence number for a put."""
        ...

    @property
    def takes_commit_nothing(self) -> bool:
        """True when taking a hold only touches memory (no stored hold, no durable delivery
        count), so that a front end may take on its own thread (see :mod:`ackqueue.aio`)."""
        ...

    @property
    def entries_stay_as_put(self) -> bool:
        """True when no other process may rewrite a waiting entry (a revisit by key): the
        pickle of a put can then be kept for the get that hands it out (itemcache.py)."""
        ...

    @property
    def stored_holds(self) -> StoredHolds:
        """What this mode does with holds that other processes see (see StoredHolds)."""
        ...

    @property
    def indexing(self) -> Indexing:
        """How the ready index is made, and whether it learns groups in memory."""
        ...

    def remove_group(self, group: str, supply: Supply) -> int:
        """Remove every waiting item of ``group`` (held ones stay held); return how many."""
        ...

    def load(self, key: Any, load: Load) -> tuple[bytes, int]:
        """``load(key)``, or GetAgain when another process took the entry meanwhile."""
        ...

    def take(self, claims: list[Claim], supply: Supply) -> Taken:
        """Count this delivery of each claim (durably where it must be) before it is handed
        out. If this raises, the claims are given back (to ``supply`` or to the store)."""
        ...

    def take_away(self, claim: Claim, supply: Supply) -> Taken:
        """A plain ``get``: remove the claimed entry for good (or with the caller's
        transaction). Nothing kept: another process got it first, or it was buried."""
        ...

    def rides(
        self, supply: Supply, timers: Timers, claim_ready: ClaimReady, next_id: NextId
    ) -> Rides:
        """The rides of this queue's consumers: ``claim_ready(n)`` claims up to ``n`` ready
        items without waiting, ``next_id()`` names a delivery."""
        ...

    def refund_locked(self, key: Any) -> None:
        """A delivery of ``key`` was snoozed: it does not count (the stored count, where
        there is one, was lowered by the settling edit)."""
        ...

    def forget_locked(self, key: Any) -> None:
        """``key`` left the queue for good, or was handed out by a plain get."""
        ...


def exhausted_reason(max_attempts: int | None) -> str:
    return f"delivered {max_attempts} times without an ack (max_attempts)"
