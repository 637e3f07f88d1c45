"""The interface of a queue's mode: one process owning its queue, or several sharing it.

In a single process (:class:`~ackqueue.delivery.local.LocalMode`), holds live in memory and a
consumer get commits nothing unless ``max_attempts`` asks it to count deliveries durably. When
other processes share the database (:class:`~ackqueue.shared.mode.SharedMode`), a hold must be
visible to them: a get commits it, settling checks it is still ours, and the ready order is
read from the stored tree. The queue chooses the mode when it opens and talks to it only
through this interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ackqueue.delivery.claims import Claim
from ackqueue.delivery.holds import Hold
from ackqueue.delivery.ready import ReadyKeys, ScanAfter
from ackqueue.delivery.supply import Supply

Edit = Callable[[], None]
Load = Callable[[Any], tuple[bytes, int]]
Void = Callable[[Callable[[Any], bool]], None]


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


class Mode(Protocol):
    @property
    def shared(self) -> bool:
        """True when other processes may use the queue too (its holds are stored)."""
        ...

    def next_seq_locked(self) -> int:
        """The next sequence number for a put."""
        ...

    def new_index(self, backlog: int, scan_after: ScanAfter) -> ReadyKeys:
        """The ready index; ``backlog`` entries stored before this session are ready."""
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

    def ride(self, claims: list[Claim]) -> Ride | None:
        """Holds on ``claims`` to commit with an ack (None: take them on their own)."""
        ...

    def fence(self, holds: list[Hold], edit: Edit | None, check: Edit) -> tuple[Edit | None, Edit]:
        """Settling ``holds`` with ``edit`` after ``check``: what really commits."""
        ...

    def settled_locked(self, keys: list[Any]) -> None:
        """Those holds were settled and committed."""
        ...

    def refund_locked(self, key: Any) -> None:
        """A delivery of ``key`` was snoozed: it does not count (the stored count, where
        there is one, was lowered by the settling edit)."""
        ...

    def forget_locked(self, key: Any) -> None:
        """``key`` left the queue for good, or was handed out by a plain get."""
        ...

    def check_extend(self, hold: Hold) -> None:
        """A lease is being extended: fail if the hold is no longer ours."""
        ...

    def may_be_void(self, taken_at: float) -> bool:
        """Whether a hold taken at ``taken_at`` (``time.monotonic()``) may have been taken back
        by another process (shared mode: this process's session lapsed or may have): what is
        handed out from a buffer after such a gap must be given back, not worked on."""
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


def exhausted_reason(max_attempts: int | None) -> str:
    return f"delivered {max_attempts} times without an ack (max_attempts)"
