"""How a worker pool retries a failed item: exponential backoff with jitter."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("ackqueue")


@dataclass(frozen=True)
class Retry:
    """Exponential backoff: the n-th failure waits ``base * factor**(n-1)`` seconds.

    ``base`` is the first wait in seconds, ``factor`` what each further failure multiplies it by.

    The wait is capped at ``max_delay`` and spread by up to ``jitter`` (a fraction) so that
    items failing together do not come back together. ``max_attempts`` (if set) is the pool's
    own limit: an item that failed this many deliveries goes to the dead letters, with its
    exception as the reason. It can lower the queue's ``max_attempts``, not raise it: the queue
    buries an item at its own limit whoever handles it, so the smaller of the two applies (and
    the pool still buries the item itself, with the exception, and counts it dead).

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


def attempt_limit(retry: Retry, queue_limit: int | None) -> int | None:
    """The deliveries after which a pool buries a failing item: the smaller of the retry's
    ``max_attempts`` and the queue's (see :class:`Retry`), or None for no limit."""
    limits = [n for n in (retry.max_attempts, queue_limit) if n is not None]
    return min(limits) if limits else None


def warn_if_capped(retry: Retry, queue_limit: int | None) -> None:
    """Log that the retry's ``max_attempts`` is above the queue's, which applies instead."""
    if retry.max_attempts is not None and queue_limit is not None \
            and retry.max_attempts > queue_limit:
        log.warning("Retry(max_attempts=%d) is above the queue's max_attempts=%d: a failing "
                    "item goes to the dead letters after %d deliveries",
                    retry.max_attempts, queue_limit, queue_limit)


def failure_reason(exc: BaseException) -> str:
    """A dead letter's reason for ``exc``: its type and message, also when its ``__str__``
    raises (a handler's exception must not take the pool down with it)."""
    try:
        message = str(exc)
    except Exception as broken:
        message = f"<str() failed: {type(broken).__name__}>"
    return f"{type(exc).__name__}: {message}"


def _check_number(
    name: str, value: float, wanted: str, ok: Callable[[float], bool], infinite: bool = False
) -> None:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or math.isnan(value) or (math.isinf(value) and not infinite) \
            or not ok(value):
        raise ValueError(f"Retry {name} must be {wanted}, not {value!r}")
