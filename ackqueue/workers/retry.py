"""How a worker pool retries a failed item: exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Exponential backoff: the n-th failure waits ``base * factor**(n-1)`` seconds.

    ``base`` is the first wait in seconds, ``factor`` what each further failure multiplies it by.

    The wait is capped at ``max_delay`` and spread by up to ``jitter`` (a fraction) so that
    items failing together do not come back together. ``max_attempts`` (if set) overrides the
    queue's own: an item that failed this many deliveries goes to the dead letters.
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    max_attempts: int | None = None

    def delay(self, attempts: int) -> float:
        """Seconds to wait before the next delivery, after ``attempts`` failed deliveries."""
        wait = min(self.max_delay, self.base * self.factor ** max(0, attempts - 1))
        return wait * (1 + random.uniform(-self.jitter, self.jitter)) if self.jitter else wait
