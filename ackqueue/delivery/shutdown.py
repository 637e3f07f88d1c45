"""``q.shutdown(immediate=False)``: Python 3.13's ``queue.Queue.shutdown`` on every Python.

After a shutdown, ``put`` raises :class:`~ackqueue.ShutDown` at once; ``get`` goes on handing
out what is ready and raises ``ShutDown`` when nothing is left. Blocked callers wake. With
``immediate=True`` gets raise at once and ``join()`` returns; unlike the standard library, the
items are not destroyed: ready, delayed and held items all stay stored for the next start
(held ones are given back, so their holders can no longer ack them). Acks of items still held
keep working after a graceful shutdown.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Iterator
from typing import Any

from ackqueue.base.interrupts import Shield
from ackqueue.errors import ShutDown

_StdShutDown = getattr(queue, "ShutDown", None)


def as_our_shutdown(exc: BaseException) -> BaseException:
    """The standard library's own ShutDown (3.13+, raised by its put/get) as ackqueue's."""
    if _StdShutDown is not None and isinstance(exc, _StdShutDown) and not isinstance(exc, ShutDown):
        return ShutDown(str(exc) or "the queue was shut down")
    return exc


@contextlib.contextmanager
def calling_stdlib(tls: Any, op: str, undo: Callable[[], None]) -> Iterator[None]:
    """Run the standard library's ``put`` or ``get`` (``op``) for this thread.

    While it runs, ``_qsize`` knows which one is asking (a closed or shut-down queue lets each
    through to the hook that raises). If it fails, ``undo`` gives back what our hook had already
    taken or staged, and the standard library's own ShutDown comes out as ackqueue's.
    """
    tls.op = op
    try:
        yield
    except BaseException as exc:
        undo()
        ours = as_our_shutdown(exc)
        if ours is not exc:
            raise ours from None
        raise
    finally:
        tls.op = None


class ShutdownMixin:
    def shutdown(self: Any, immediate: bool = False) -> None:
        """Refuse further puts; with ``immediate``, stop handing out items at once too."""
        with Shield(interruptible=False), self.mutex:  # a drain cut halfway would not add up
            self.is_shutdown = True
            if immediate and not self._drained:
                self._drain_locked()
            self.not_empty.notify_all()
            self.not_full.notify_all()
            self._landed.notify_all()

    def _drain_locked(self: Any) -> None:
        """Stop delivering: forget in memory what is ready, delayed or held; storage keeps it."""
        self._drained = True
        forgotten = len(self._ready) + len(self._delays) + self._held
        for table in list(self._tables):
            table.closed = True
            taken = table.take_all_unsettled()
            for hold in taken:
                self._end_lease_locked(hold)
            self._held -= len(taken)
            if not table.by_id:
                self._tables.discard(table)
        self._ready = self._new_ready_index(0)
        self._delays.pending.clear()
        self.unfinished_tasks = max(0, self.unfinished_tasks - forgotten)
        self.all_tasks_done.notify_all()

    def _shut_down_error(self: Any) -> ShutDown:
        return ShutDown(f"queue {self.name!r} was shut down")
