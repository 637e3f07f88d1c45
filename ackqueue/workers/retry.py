"""How a worker pool retries a failed item: exponential backoff with jitter."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Exponential backoff: the n-th failure waits ``base * factor**(n-1)`` seconds.

    ``base`` is the first wait in seconds, ``factor`` what each further failure multiplies it by.

    The wait is capped at ``max_delay`` and spread by up to ``jitter`` (a fraction) so that
    items failing together do not come back together. ``max_attempts`` (if set) overrides the
    queue's own: an item that failed this many deliveries goes to the dead letters.

    A value that could not make sense (a negative wait, a jitter outside 0..1, a factor that
    shrinks the wait) is a ``ValueError`` naming it, here, not a pool that waits for ever.
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        _check_number("base", self.base, "0 or more seconds", lambda v: v >= 0)
        _check_number("factor", self.factor, "1 or more", lambda v: v >= 1)
        # No cap (math.inf) is a cap too; an infinite base or factor would wait for ever.
        _check_number("max_delay", self.max_delay, "0 or more seconds", lambda v: v >= 0,
                      infinite=True)
        _check_number("jitter", self.jitter, "a fraction from 0 to 1", lambda v: 0 <= v <= 1)
        attempts = self.max_attempts
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise ValueError(f"Retry max_attempts must be a whole number of at least 1 (or None), "
                             f"not {attempts!r}")

    def delay(self, attempts: int) -> float:
        """Seconds to wait before the next delivery, after ``attempts`` failed deliveries."""
        wait = min(self.max_delay, self.base * self.factor ** max(0, attempts - 1))
        return wait * (1 + random.uniform(-self.jitter, self.jitter)) if self.jitter else wait


def _check_number(
    name: str, value: float, wanted: str, ok: Callable[[float], bool], infinite: bool = False
) -> None:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or math.isnan(value) or (math.isinf(value) and not infinite) \
            or not ok(value):
        raise ValueError(f"Retry {name} must be {wanted}, not {value!r}")
