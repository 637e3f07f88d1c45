"""Claiming: how an item leaves the ready supply on its way to a caller.

:meth:`Claimer.claim_next` runs the standard library's blocking ``get``, whose ``_get`` hook is
:meth:`Claimer.claim_head`; if anything fails before the caller has the claim, it goes back.
:meth:`Claimer.claim_ready` takes what else is ready without waiting (``get_many``). An item
that can no longer be unpickled is moved to the dead letters so the head moves on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ackqueue.base.interrupts import checkpoint, hold_back
from ackqueue.delivery.holds import HoldTable
from ackqueue.delivery.supply import Claim, GetAgain
from ackqueue.errors import AckQueueError, Empty, ItemLoadError, QueueClosedError
from ackqueue.queue.core import Core, calling_stdlib

StdlibGet = Callable[[bool, float | None], Any]


class Claimer:
    def __init__(self, core: Core, stdlib_get: StdlibGet) -> None:
        self._signals, self._life, self._tasks = core.signals, core.life, core.tasks
        self._book, self._supply, self._mode = core.book, core.supply, core.mode
        self._meter, self._calls, self._clock = core.meter, core.calls, core.clock
        self._stdlib_get = stdlib_get

    def claim_next(
        self, block: bool, timeout: float | None, table: HoldTable | None = None
    ) -> Claim:
        """Claim the next ready item, waiting like ``queue.Queue.get``; ``table`` is the
        consumer getting it, if any: closing that consumer wakes this wait with
        QueueClosedError."""
        if block:
            self._signals.listeners.check_may_block("a blocking get")
        self._calls.getter = table
        try:
            return self._claim_next(block, timeout)
        finally:
            self._calls.getter = None

    def _claim_next(self, block: bool, timeout: float | None) -> Claim:
        calls = self._calls
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        calls.deadline = time.monotonic() if not block else deadline
        while True:
            calls.claim = None
            calls.unloadable = None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                # Neither GetAgain nor ItemLoadError leaves a claim: undoing first changes nothing.
                with calling_stdlib(calls, "get", undo=self._give_back_claim):
                    item = self._stdlib_get(block, remaining)
            except GetAgain:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    raise Empty from None
                continue
            except ItemLoadError as exc:
                unloadable = calls.unloadable
                calls.unloadable = None
                assert unloadable is not None
                raise self.bury_unloadable(unloadable[0], exc) from exc
            claim = calls.claim
            calls.claim = None
            if claim is None:
                raise AckQueueError("a subclass's _get did not call AckQueue._get")
            claim.item = item
            return claim

    def _give_back_claim(self) -> None:
        """Give back what this thread's ``_get`` claimed, if anything (its get failed after)."""
        claim = self._calls.claim
        if claim is not None:
            with self._signals.mutex:
                self._supply.make_ready_locked(claim.key)

    def check_getter_open(self) -> None:
        """The queue, and the consumer this thread is getting for, are both still open."""
        self._life.check_open()
        if self._calls.getter_closed():
            if self._life.shut_down:  # closed by an immediate shutdown
                raise self._life.shut_down_error()
            raise QueueClosedError("this consumer was closed while its get was waiting")

    def size_seen(self) -> int:
        """The ``_qsize`` hook: what the standard library's put and get (and ``qsize()``) see."""
        checkpoint(self.wake_waits)  # queue.Queue asks before each of its waits
        supply, life, op = self._supply, self._life, self._calls.op
        if life.closed or life.shut_down:
            # Let blocked callers through to _put/_get, which raise; public calls see the truth.
            if op == "put":
                return 0
            if op == "get":
                return max(1, len(supply))
        if op == "put":
            return self.places_taken()
        # Puts still committing count, unless an immediate shutdown will forget them as they land.
        n = len(supply) + (0 if life.drained else supply.staged)
        if life.paused and op == "get":
            n = 0  # a paused queue hands nothing out: gets wait (or time out) as if empty
        if not n and self._calls.getter_closed():
            return 1  # about to wait for a consumer closed meanwhile: on to _get, which raises
        return n

    def places_taken(self) -> int:
        """What ``maxsize`` counts (the mutex is held): the ready items of every group, those
        that may not deliver now too, and puts on their way, inside transactions too (their
        places are taken when they are staged); neither delayed nor held items."""
        supply = self._supply
        # An immediate shutdown forgets the puts still committing as they land.
        return supply.waiting() - (supply.staged if self._life.drained else 0)

    def claim_head(self) -> Any:
        """The ``_get`` hook: claim the first ready item (the mutex is held)."""
        supply, life, calls = self._supply, self._life, self._calls
        while not len(supply):
            self.check_getter_open()
            if life.drained:
                raise life.shut_down_error()
            if not supply.staged:
                if life.shut_down:
                    raise life.shut_down_error()
                raise GetAgain
            # The queue only looked non-empty because of puts still committing: wait for them
            # to land, but no longer than the caller's own timeout (not at all for a nowait).
            deadline = calls.deadline
            checkpoint(self.wake_waits)
            if deadline is None:
                self._signals.landed.wait()
            elif not self._signals.landed.wait(deadline - time.monotonic()) and not len(supply):
                raise GetAgain
        self.check_getter_open()
        if life.drained:
            raise life.shut_down_error()
        hold_back()  # the claim takes an item: Ctrl-C waits until it is handed out or back
        try:
            key = supply.pop()
        except IndexError:  # counted ready, yet none to take: the index read at open was wrong
            self._book.check_entries()
            raise
        try:
            item, attempts, data = self._load(key)
        except ItemLoadError as exc:
            calls.unloadable = (key, exc)
            raise
        except BaseException as exc:
            supply.ready.push(key)
            if isinstance(exc, KeyError):  # a key the index read at open, which a lookup misses
                self._book.check_entries()
            raise
        calls.claim = Claim(key, item, attempts, data=data)
        if calls.getter is None:
            self._meter.got_locked()  # a plain get: it leaves the queue for good
        return item

    def _load(self, key: Any) -> tuple[Any, int, bytes | None]:
        """The item, its attempts, and the bytes it came from if the take must check that
        they are still the stored ones (see :attr:`Claim.data`)."""
        data, attempts = self._mode.load(key, self._supply.load)
        item = self._book.codec.decode(data, _EntryName(key, self._book.name))
        return item, attempts, None if self._mode.entries_stay_as_put else data

    def claim_ready(self, limit: int) -> list[Claim]:
        """Claim up to ``limit`` items that are ready now, without waiting."""
        claims: list[Claim] = []
        unloadable: list[tuple[Any, ItemLoadError]] = []
        supply, life = self._supply, self._life
        hold_back()  # called with an item already claimed; these claims belong to it too
        with self._signals.mutex:
            while len(claims) < limit and len(supply) and not life.closed and not life.drained:
                if life.paused:
                    break
                key = supply.pop()
                try:
                    item, attempts, data = self._load(key)
                except ItemLoadError as load_error:
                    unloadable.append((key, load_error))
                    continue
                except BaseException:
                    supply.ready.push(key)
                    break
                claims.append(Claim(key, item, attempts, data=data))
            if claims:
                self._signals.not_full.notify(len(claims))
        try:
            for key, failure in unloadable:
                self.bury_unloadable(key, failure)
        except BaseException:
            with self._signals.mutex:
                for claim in claims:
                    supply.make_ready_locked(claim.key)
            raise
        return claims

    def bury_unloadable(self, key: Any, exc: ItemLoadError) -> ItemLoadError:
        """Move the item that could not be loaded to the dead letters, so the head moves on."""
        book, now = self._book, self._clock()

        def edit() -> None:
            book.bury(key, str(exc), now, None)

        try:
            book.store.run(edit)
        except BaseException:
            with self._signals.mutex:
                self._supply.make_ready_locked(key)
            raise
        with self._signals.mutex:
            self._mode.forget_locked(key)
            self._supply.gone_locked(key)
            self._tasks.finished_locked(1)
            self._meter.buried_locked()
        return ItemLoadError(f"{exc}; it was moved to the dead letters")

    def wake_waits(self) -> None:
        """Wake every wait on this queue to check again (for a Ctrl-C on its way to one)."""
        with self._signals.mutex:
            self._signals.wake_all_locked()


class _EntryName:
    """How an item that cannot be loaded is named, formatted only then: the key of a
    ``PriorityAckQueue`` entry holds the item, whose repr at every get cost as much as a
    small item's unpickling."""

    __slots__ = ("_key", "_queue")

    def __init__(self, key: Any, queue: str) -> None:
        self._key, self._queue = key, queue

    def __str__(self) -> str:
        return f"item {self._key!r} of queue {self._queue!r}"
