"""Shared mode: one queue used by several processes through ZEO or RelStorage.

:class:`~ackqueue.shared.mode.SharedMode` implements the same :class:`~ackqueue.delivery.mode.Mode`
interface as single-process mode, with holds stored in the database (:mod:`.holdmarks`),
sessions kept alive by lease and reaped when they lapse (:mod:`.sessions`), the ready order read
from the stored tree (:mod:`.ready`) and a watcher that wakes blocked gets when another process
commits (:mod:`.watching`). May import :mod:`ackqueue.base`, :mod:`ackqueue.storage` and
:mod:`ackqueue.delivery`.
"""
