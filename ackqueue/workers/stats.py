"""What a worker pool reports: its counts, and why its last run ended."""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass
class PoolStats:
    """What a pool has done so far, and why its last run ended.

    ``done`` counts jobs whose ack is durable. ``stopped_by`` is None when the run ended by
    itself (``run_until_empty()`` found the queue drained, or the queue was shut down and
    drained), else what stopped it: ``"SIGINT"``, ``"SIGTERM"``, ``"stop()"``, ``"closed"``
    (the queue was closed under the pool: what it had not handled stays in the queue), or
    ``"error"`` (every worker thread ended by a ``BaseException`` from the handler, or the
    feeder failed: an ack, nack or burial that could not commit, say; the log says which).
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
