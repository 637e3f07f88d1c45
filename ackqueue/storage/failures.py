"""How a storage's failures look from here, whatever the engine: a ZEO client that lost its
server, a RelStorage driver whose database refuses connections, an abort that cannot reach
either. The queue turns them into its own :class:`~ackqueue.errors.StorageError`.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("ackqueue")

# The base classes PEP 249 (DB-API 2.0) asks every database driver to define; RelStorage lets
# its driver's errors through (psycopg2's OperationalError when PostgreSQL is down).
DRIVER_ERROR_BASES = ("DatabaseError", "InterfaceError")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is ZEO's ``ClientDisconnected``: a call cut because the connection to
    the server dropped. A read may be tried again (ZEO's next call waits for the connection);
    a commit's outcome is unknown."""
    return any(
        kind.__module__ == "ZEO.Exceptions" and kind.__name__ == "ClientDisconnected"
        for kind in type(exc).__mro__
    )


def driver_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a database driver's error (a DB-API ``DatabaseError`` or
    ``InterfaceError``: the database is down, refuses connections, or dropped one)."""
    return any(kind.__name__ in DRIVER_ERROR_BASES for kind in type(exc).__mro__)


def storage_failed(exc: BaseException) -> bool:
    """Whether ``exc`` says the storage could not be reached: :func:`connection_lost` or
    :func:`driver_error`."""
    return connection_lost(exc) or driver_error(exc)


def committed_despite(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a commit, came after the storage had committed it: ZEO's
    client-cache check "new last tid ... must be greater than previous one" in the client's own
    ``tpc_finish`` (ZEO issue 193).

    ZEO's ``tpc_finish_co`` awaits the server's answer to ``tpc_finish`` (so the transaction
    is committed and durable on the server, its tid known), then records that tid as the
    cache's last one. The answer wakes that coroutine through a scheduled callback, while an
    invalidation message that arrived in the same read is handled at once: when another
    client's later commit (tid T2) is read together with this answer (T1 < T2), the cache
    already says T2, and recording T1 raises ValueError. ZEO then closes the connection (its
    cache is checked again at the reconnection) and lets the error out of a commit that
    happened. Only that frame and that message are taken for it."""
    if not isinstance(exc, ValueError) or "must be greater than previous one" not in str(exc):
        return False
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "tpc_finish_co":
            return True
        tb = tb.tb_next
    return False


def abort_quietly(tm: Any) -> None:
    """Abort ``tm``'s transaction, which is already failing. An abort that cannot reach the
    storage (RelStorage rolls back on a connection that is gone) has nothing to undo there:
    that is logged, not raised over the failure being handled."""
    try:
        tm.abort()  # with nothing begun, nothing (the writer's explicit manager too)
    except Exception as exc:
        log.debug("ackqueue: abort could not reach the storage: %r", exc)
