"""What the queue's collaborators share: its lock and conditions, and its lifecycle.

``queue.Queue`` makes the mutex and its three conditions; the queue adds ``landed`` (a get
waiting for puts still committing). Every collaborator's ``*_locked`` method runs with the
mutex held, and each wakes the waiters its change concerns.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ackqueue.errors import QueueClosedError, ShutDown


@dataclass(eq=False)
class Signals:
    mutex: threading.Lock
    not_empty: threading.Condition
    not_full: threading.Condition
    all_tasks_done: threading.Condition
    landed: threading.Condition

    def wake_all_locked(self) -> None:
        self.not_empty.notify_all()
        self.not_full.notify_all()
        self.landed.notify_all()


class Lifecycle:
    """Whether a queue is open, shut down (``shutdown()``) or drained (an immediate one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.shut_down = False
        self.drained = False
        self.paused = False  # no deliveries until resumed (stored: see QueueRecord.paused)

    def check_open(self) -> None:
        if self.closed:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    def check_can_put(self) -> None:
        self.check_open()
        if self.shut_down:
            raise self.shut_down_error()

    def shut_down_error(self) -> ShutDown:
        return ShutDown(f"queue {self.name!r} was shut down")


class Tasks:
    """``queue.Queue``'s count of unfinished tasks, which ``join()`` waits on.

    It exists before the standard library's ``__init__`` sets the count, and learns the
    condition ``join()`` waits on once that ``__init__`` has made it (:meth:`wake_on`).
    """

    def __init__(self) -> None:
        self.unfinished = 0
        self._all_done: threading.Condition | None = None

    def wake_on(self, all_tasks_done: threading.Condition) -> None:
        self._all_done = all_tasks_done

    def added_locked(self, n: int) -> None:
        self.unfinished += n

    def finished_locked(self, n: int) -> None:
        """``n`` items left the queue for good (acked, dead-lettered): ``task_done`` for them."""
        if not n:
            return
        self.unfinished = max(0, self.unfinished - n)
        if self.unfinished == 0 and self._all_done is not None:
            self._all_done.notify_all()
