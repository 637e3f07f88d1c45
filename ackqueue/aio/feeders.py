"""A feeder of :class:`~ackqueue.aio.pool.AsyncWorkerPool`: a task that owns a consumer, fills
the pool's buffer from it, and settles on it what the workers hand back for its items."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

# Feeder tasks, each with its consumer: while one waits for its get_many (items read on a
# thread), the other's items are being handled.
FEEDERS = 2
# Tasks of a feeder that commit its acks: while one waits for its fsync, the other commits.
SETTLERS = 2


class Feeder:
    """One feeder's own state: what the workers hand back to it, to settle on its consumer."""

    def __init__(self) -> None:
        self.results: collections.deque[tuple[Any, object]] = collections.deque()
        self.ready = asyncio.Event()  # results are waiting, or the pool is closing
        self.settling = 0
        self.closing = False

    def hand_back(self, item: Any, outcome: object) -> None:
        self.results.append((item, outcome))
        self.ready.set()
