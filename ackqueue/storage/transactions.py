"""All-or-nothing groups of queue operations: ``with q.transaction():``.

A transaction belongs to the thread that opened it and to one database (one :class:`Store`),
so it may span several named queues of that database. Inside the block, queue operations do
their in-memory part at once where that is safe to undo (a get claims its item, so nobody else
receives it) and defer the rest: each contributes a stored *edit*, an in-memory effect to apply
*after* the commit (new puts become ready, acked holds disappear), and an *undo* for a rollback
(claimed items go back where they were, acks and nacks are forgotten). Leaving the block
commits every edit as one ``Store.run`` change, so one commit; an exception inside the block,
or a failed commit, undoes everything in reverse order.

Two things are not part of the transaction: with ``max_attempts`` set, a get records its
delivery durably at once (a poison item must stop even when processed inside a transaction),
and a nested ``transaction()`` in the same thread is an error rather than a silent join.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ackqueue.base.interrupts import Shield
from ackqueue.errors import AckQueueError

if TYPE_CHECKING:
    from ackqueue.storage.store import Store

Action = Callable[[], Any]


class _Open(threading.local):
    # A class default: every put, get and ack asks, nearly always of a thread that never
    # opened one, and getattr with a default pays for an AttributeError raised and caught.
    tx: Transaction | None = None


_local = _Open()


class TransactionError(AckQueueError):
    """A transaction was used the wrong way (nested, or across two databases)."""


class Transaction:
    """The operations of one ``with ...transaction():`` block, committed together."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._checks: list[Action] = []
        self._edits: list[Action] = []
        self._after_commit: list[Action] = []
        self._undos: list[Action] = []

    def add(
        self,
        edit: Action | None = None,
        *,
        check: Action | None = None,
        after_commit: Action | None = None,
        undo: Action | None = None,
    ) -> None:
        """Register one operation's parts. ``check`` runs in the commit before any edit,
        so a failing check leaves the database untouched."""
        if check is not None:
            self._checks.append(check)
        if edit is not None:
            self._edits.append(edit)
        if after_commit is not None:
            self._after_commit.append(after_commit)
        if undo is not None:
            self._undos.append(undo)

    def _apply(self) -> None:
        for check in self._checks:
            check()
        for edit in self._edits:
            edit()

    def commit(self) -> None:
        if self._edits:
            self.store.run(self._apply)

    def apply_effects(self) -> None:
        for effect in self._after_commit:
            effect()

    def rollback(self) -> None:
        for undo in reversed(self._undos):
            undo()


def current(store: Store) -> Transaction | None:
    """The calling thread's open transaction, if any; it must be on ``store``."""
    tx = _local.tx
    if tx is not None and tx.store is not store:
        raise TransactionError(
            f"this thread's transaction is on {tx.store.where}; a transaction covers the queues "
            f"of one database, and this queue is in {store.where}"
        )
    return tx


@contextmanager
def transaction(store: Store) -> Iterator[Transaction]:
    """Commit every queue operation of the block together, or none of them."""
    if _local.tx is not None:
        raise TransactionError("this thread is already inside a transaction; they do not nest")
    tx = Transaction(store)
    # The block itself stays interruptible (Ctrl-C in it rolls back); the commit with its
    # in-memory effects, and a rollback, run to their end first (see interrupts.py).
    try:
        _local.tx = tx
        yield tx
    except BaseException:
        with Shield(interruptible=False):
            _local.tx = None
            tx.rollback()
        raise
    with Shield(interruptible=False):
        _local.tx = None
        try:
            tx.commit()
        except BaseException:
            tx.rollback()
            raise
        tx.apply_effects()
