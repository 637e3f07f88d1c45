"""Puts by key, the seen-set, revisits and removal: the API side of a crawler's frontier.

``put(item, key=k)`` stores the item only if no live item (ready, delayed or held) has key
``k`` and ``k`` is not remembered as seen; it returns whether it stored it. A first look at the
stored index (no commit) answers at once for keys that are live or seen, which is most of a
crawler's puts; the rest are staged like any put and their commit checks again, so the check
and the insert are one commit (and, inside ``transaction()``, the commit of the whole block).

Revisits: a put by key whose key is live and waiting replaces the item's payload (and due time,
if the put gives one) with ``replace=True``; without it, only an earlier due time wins (the item
comes sooner; the put still returns False: nothing new was stored). A held item is never
revised: the consumer working on it decides its fate, so the put returns False and changes
nothing; put again after its ack (or nack) if the new payload matters.

``remove(key)`` drops a waiting item; a held one is refused with :class:`KeyHeldError` for the
same reason. ``remove_where(pred)`` drops every waiting item ``pred`` accepts (held ones are
skipped). Removed and dead-lettered items free their key; only a done item (acked, or handed
out by a plain ``get``) put to be remembered (``unique=``) leaves its key in the seen-set.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ackqueue.delivery.conditions import notify_waiting
from ackqueue.delivery.groups import check_group
from ackqueue.errors import ItemLoadError, KeyHeldError, KeyTakenError, UnknownKeyError
from ackqueue.queue.core import Core
from ackqueue.queue.putting import Puts
from ackqueue.shared.holdmarks import live_hold_in
from ackqueue.storage.items import Codec, Staged
from ackqueue.storage.keys import KeyBook, Live, NewPut, Revisit, index_key, remember_seconds
from ackqueue.storage.transactions import Transaction, current

# ``unique=`` as the API takes it: "forever", seconds, or None (the queue's default).
Unique = str | float | None


class Keys:
    """Puts by key and the rest, for one queue; ``unique`` is the queue's default scope."""

    def __init__(self, core: Core, puts: Puts, unique: Unique) -> None:
        self._core = core
        self._puts = puts
        self._store = core.book.store
        self._remember = remember_seconds(unique)
        # Inside an edit: a hold under a session no longer listed is void (a take that
        # committed after a reap of its session), as a get sees it (holdmarks.py).
        self._book = KeyBook(core.book, live_hold_in(self._store.root))
        # Keys put in each open transaction, so that a second put of one answers False.
        self._pending: weakref.WeakKeyDictionary[Transaction, set[bytes]] = (
            weakref.WeakKeyDictionary()
        )

    # -- puts ------------------------------------------------------------------------------

    def put(
        self, item: Any, key: Any, block: bool, timeout: float | None, priority: int,
        due: float, unique: Unique, replace: bool, group: str | None = None,
    ) -> bool | None:
        """A put, by key or not: a plain one returns None, as ``queue.Queue.put`` does."""
        if key is None:
            if unique is not None or replace:
                _no_key_options(unique, replace)
            self._puts.put(item, block, timeout, priority, due, group)
            return None
        return self.put_many(
            [item], [key], block, timeout, priority, due, unique, replace, group
        )[0]

    def put_batch(
        self, items: list[Any], keys: Iterable[Any] | None, block: bool, timeout: float | None,
        priority: int, due: float, unique: Unique, replace: bool, group: str | None = None,
    ) -> list[bool] | None:
        """``put_many``, by key or not (a plain one returns None)."""
        if keys is None:
            _no_key_options(unique, replace)
            self._puts.put_many(items, block, timeout, priority, due, group)
            return None
        return self.put_many(
            items, list(keys), block, timeout, priority, due, unique, replace, group
        )

    def put_many(
        self, items: list[Any], keys: list[Any], block: bool, timeout: float | None,
        priority: int, due: float, unique: Unique, replace: bool, group: str | None = None,
    ) -> list[bool]:
        """Put each item under its key; which were stored (or, with ``replace``, revised).
        A revisit keeps the item's group (the put's ``group`` is for new items)."""
        check_group(group)
        if len(items) != len(keys):
            raise ValueError(f"put_many got {len(items)} items and {len(keys)} keys: "
                             "give one key per item")
        indexed = [index_key(key) for key in keys]
        remember = self._remember if unique is None else remember_seconds(unique)
        core, tx = self._core, current(self._store)
        result = [False] * len(items)
        first: dict[bytes, int] = {}
        # A key twice in one batch: with replace, a later put revises the first one's item
        # (and answers as the first does: True once that one is stored or revised).
        revising: list[tuple[int, int]] = []
        for i, key in enumerate(indexed):
            if key in first:
                if replace:
                    items[first[key]] = items[i]
                    revising.append((i, first[key]))
            else:
                first[key] = i

        def answered() -> list[bool]:
            for i, j in revising:
                result[i] = result[j]
            return result

        pending = self._pending.setdefault(tx, set()) if tx is not None else set()
        with core.signals.mutex:
            core.life.check_can_put()
            states = self._book.states(list(first), core.clock())
        new: list[int] = []
        revisits: list[tuple[int, Revisit]] = []
        for (key, i), state in zip(first.items(), states, strict=True):
            if key in pending or state is True:
                continue  # live in this transaction already, or seen
            if state is False:
                new.append(i)
            elif isinstance(state, Live):
                revisit = self._revisit(key, state, items[i], due, replace, core.book.codec)
                if revisit is not None:
                    revisits.append((i, revisit))
        staged: list[Staged] = []
        if new:
            staged = self._puts.stage_batch(
                [items[i] for i in new], block, timeout, priority, due, tx is not None, group
            )
        with core.signals.mutex:
            revisits = [(i, r) for i, r in revisits
                        if core.supply.withdraw_locked(r.live.entry_key)]
        news = [NewPut(s, indexed[i], remember) for s, i in zip(staged, new, strict=True)]
        if not news and not revisits:
            return answered()  # every key live or seen: nothing to commit
        now = core.clock()
        edit = self._book.admitter(news, [r for _, r in revisits], now)
        landing = _Landing(core, self._puts, news, [r for _, r in revisits], tx is not None)
        if tx is not None:
            shown = dict(zip(indexed, keys, strict=True))
            taken = self._book.taken(
                news, [r for _, r in revisits if r.data is not None], now)

            def check() -> None:
                # The block was told True from a look before its commit; a put of the same
                # key committed since (another thread, another process) would make the block
                # commit without the item. It fails instead, before any of its edits, so
                # that its caller knows and nothing of it is stored.
                lost = taken()
                if lost:
                    raise KeyTakenError(
                        f"a put by key inside this transaction on queue {core.book.name!r} "
                        f"answered True, but another put of key {shown[lost[0]]!r} committed "
                        "first: the whole transaction was rolled back (nothing of it was "
                        "stored); run it again to see the key as it is now"
                    )

            tx.add(lambda: landing.note(edit()), check=check, after_commit=landing.land,
                   undo=landing.undo)
            pending.update(put.key for put in news)
            for i in new:
                result[i] = True
            for i, r in revisits:
                result[i] = r.data is not None
            return answered()
        try:
            landing.note(self._store.run(edit))
        except BaseException:
            landing.undo()
            raise
        landing.land()
        for i, ok in zip(new, landing.stored, strict=True):
            result[i] = ok
        for (i, r), ok in zip(revisits, landing.revised, strict=True):
            result[i] = ok and r.data is not None
        return answered()

    @staticmethod
    def _revisit(
        key: bytes, live: Live, item: Any, due: float, replace: bool, codec: Codec
    ) -> Revisit | None:
        if replace:
            return Revisit(key, live, codec.encode(item), due or live.not_before)
        if due < live.not_before:
            return Revisit(key, live, None, due)  # the earlier due time wins
        return None

    # -- the seen-set ------------------------------------------------------------------------

    def seen(self, key: Any) -> bool:
        indexed = index_key(key)
        with self._core.signals.mutex:
            self._core.life.check_open()
            return self._book.seen(indexed, self._core.clock())

    def seen_count(self) -> int:
        with self._core.signals.mutex:
            self._core.life.check_open()
            return self._book.seen_count(self._core.clock())

    def forget(self, key: Any) -> bool:
        """Let ``key`` in again; whether it was remembered (inside a transaction: with it)."""
        indexed = index_key(key)
        self._core.life.check_open()
        tx = current(self._store)
        if tx is not None:
            was = self.seen(key)
            tx.add(self._book.forgetter(indexed, self._core.clock()))
            return was
        return self._store.run(self._book.forgetter(indexed, self._core.clock()))

    # -- removing ------------------------------------------------------------------------------

    def remove(self, key: Any) -> None:
        indexed = index_key(key)
        core = self._core
        with core.signals.mutex:
            core.life.check_open()
            live = self._book.live(indexed)
            if live is None:
                raise UnknownKeyError(f"queue {core.book.name!r} has no live item with key "
                                      f"{key!r}: nothing was removed (see seen() for keys "
                                      "done already)")
            if not core.supply.withdraw_locked(live.entry_key):
                raise KeyHeldError(f"the item with key {key!r} of queue {core.book.name!r} is "
                                   "held by a consumer: its ack or nack decides; nothing was "
                                   "removed")
        self._remove([live], indexed)

    def remove_where(self, pred: Callable[[Any], object]) -> int:
        """Remove every waiting item ``pred(item)`` accepts; how many (one commit)."""
        core = self._core

        def wanted(data: bytes) -> bool:
            try:
                return bool(pred(core.book.codec.decode(data, "an item")))
            except ItemLoadError:
                return False

        with core.signals.mutex:
            core.life.check_open()
            chosen = [live for live in self._book.matching(wanted)
                      if core.supply.withdraw_locked(live.entry_key)]
        return self._remove(chosen, None) if chosen else 0

    def _remove(self, lives: list[Live], key: bytes | None) -> int:
        core = self._core
        edit = self._book.remover([live.entry_key for live in lives], key)
        done: list[bool] = []

        def finish() -> None:
            with core.signals.mutex:
                for live, removed in zip(lives, done, strict=True):
                    if removed:
                        core.mode.forget_locked(live.entry_key)
                    else:
                        core.supply.land_locked(live.entry_key, live.not_before)
                core.tasks.finished_locked(sum(done))
                if any(done):  # their places are free: puts waiting for room go on
                    notify_waiting(core.signals.not_full, sum(done))

        def undo() -> None:
            with core.signals.mutex:
                for live in lives:
                    core.supply.land_locked(live.entry_key, live.not_before)

        def apply() -> None:
            done[:] = edit()  # the last application counts: a conflict applies it again

        tx = current(self._store)
        if tx is not None:
            tx.add(apply, after_commit=finish, undo=undo)
            return len(lives)
        try:
            done.extend(self._store.run(edit))
        except BaseException:
            undo()
            raise
        finish()
        return sum(done)


def _no_key_options(unique: Unique, replace: bool) -> None:
    if unique is not None or replace:
        raise ValueError("unique= and replace= apply to puts by key: give key= (or keys=) too")


class _Landing:
    """What a put by key does in memory once its commit is known (or undone)."""

    def __init__(
        self, core: Core, puts: Puts, news: list[NewPut], revisits: list[Revisit], in_tx: bool
    ) -> None:
        self._core, self._puts, self._in_tx = core, puts, in_tx
        self._news, self._revisits = news, revisits
        self.stored: list[bool] = []
        self.revised: list[bool] = []

    def note(self, outcome: tuple[list[bool], list[bool]]) -> None:
        self.stored, self.revised = outcome  # the last application of the edit counts

    def land(self) -> None:
        core = self._core
        with core.signals.mutex:
            for revisit, ok in zip(self._revisits, self.revised, strict=True):
                live = revisit.live
                core.supply.land_locked(live.entry_key, revisit.due if ok else live.not_before)
            # The pickle is kept for the get (see delivery/itemcache.py) unless another
            # process may revise the entry meanwhile (a revisit here withdraws it first,
            # dropping the kept pickle).
            batch = [put.staged for put in self._news]
            self._puts.landed_locked(
                batch, self._in_tx, self.stored, cache=core.mode.entries_stay_as_put
            )

    def undo(self) -> None:
        core = self._core
        with core.signals.mutex:
            for revisit in self._revisits:
                core.supply.land_locked(revisit.live.entry_key, revisit.live.not_before)
            self._puts.unstaged_locked(len(self._news), self._in_tx)
