"""What a worker pool reports: the counts of a run, and why it ended."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from ackqueue.queue.queues import AckQueue


@dataclass
class PoolStats:
    """What one run of a pool did, and why it ended.

    Each run (``run()`` or ``run_until_empty()``, the next run of the same pool too) counts
    from zero in stats of its own: it returns them, and the pool's ``stats`` shows them while
    it runs and until the next run starts. The stats an earlier run returned do not change.

    ``done`` counts jobs whose ack is durable, ``failed`` the times a handler raised.
    ``dead`` counts the items this process sent to the dead letters of the pool's queue
    during the run: those the pool buried as it settled them (after a handler's last failure,
    say), and those the queue buried as the pool took them (with ``max_attempts``, an item
    whose attempts were spent already, by earlier runs or by a poison item that killed its
    process each time; an item that cannot be loaded). A consumer of the same queue used
    beside the pool in this process meanwhile counts too.

    ``stopped_by`` is None when the run ended by itself (``run_until_empty()`` found the queue
    drained, or the queue was shut down and drained), else what stopped it: ``"SIGINT"``,
    ``"SIGTERM"``, ``"stop()"``, ``"closed"`` (the queue was closed under the pool: what it
    had not handled stays in the queue), or ``"error"`` (every worker thread ended by a
    ``BaseException`` from the handler, or the feeder failed: an ack, nack or burial that
    could not commit, say; the log says which).
    """

    done: int = 0
    failed: int = 0
    dead: int = 0
    stopped_by: str | None = None

    @property
    def interrupted(self) -> bool:
        """Whether a signal (Ctrl-C, SIGTERM) ended the run before its work was done."""
        return self.stopped_by in ("SIGINT", "SIGTERM")

    @property
    def exit_code(self) -> int:
        """A process exit status saying how the run ended, as a shell reports a signal:
        0 when it ended by itself, by ``stop()`` or by its queue's ``close()``, 128 + the
        signal number when a signal stopped it (130 for Ctrl-C, 143 for SIGTERM), 1 when an
        error stopped it."""
        if self.interrupted:
            return 128 + int(signal.Signals[str(self.stopped_by)])
        return 1 if self.stopped_by == "error" else 0


class DeadLetterCount:
    """How many items this process sent to the dead letters of ``queue`` since this was made:
    what the queue's own count (the one behind ``queue.metrics().dead_lettered``) rose by.
    Every burial raises it, wherever it happens: a reject, a nack out of attempts, and the
    queue's own at a get (an item out of attempts, or one that cannot be loaded), which is
    the only way a pool learns of those."""

    def __init__(self, queue: AckQueue[Any]) -> None:
        # The meter itself, not metrics(): read after every get and settlement of a pool,
        # where metrics() would walk every hold and read the storage.
        self._meter = queue._meter
        self._before = self._meter.dead

    def __call__(self) -> int:
        return self._meter.dead - self._before
