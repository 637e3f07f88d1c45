"""Shared mode: one queue used by several processes through ZEO or RelStorage.

:class:`~ackqueue.shared.mode.SharedMode` (:mod:`.mode`) implements the same
:class:`~ackqueue.delivery.mode.Mode` interface as single-process mode: its book marks acked
entries done instead of deleting them, its ready order is read from the stored tree
(:mod:`.ready`) with group rules read from the store (:mod:`.groupgate`), and it alone has
stored holds (:class:`~ackqueue.delivery.mode.StoredHolds`): holds marked in the database
(:mod:`.holdmarks`) under sessions kept alive by lease and reaped when they lapse
(:mod:`.sessions`). Sequence numbers come from blocks reserved in the stored record; an ack may
take the consumer's next items in its own commit (:mod:`.riding`); a watcher wakes blocked gets
when another process commits (:mod:`.watching`) and a sweeper deletes the entries that acks
marked done (:mod:`.sweeping`).

May import :mod:`ackqueue.delivery`, :mod:`ackqueue.storage`, :mod:`ackqueue.base`,
:mod:`ackqueue.records` and :mod:`ackqueue.errors`.
"""

from __future__ import annotations

from ackqueue.storage.store import Store


def wants_shared(store: Store, shared: bool | None) -> bool:
    """Whether a queue on ``store`` runs in shared mode (``shared`` None: if its storage is one
    that processes share)."""
    if shared is not None:
        return shared
    from ackqueue.storage.store import is_shared_storage

    return is_shared_storage(store.db.storage)
