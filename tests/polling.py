"""Waiting helpers for tests: poll a condition with a deadline instead of sleeping."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, what: str = "") -> None:
    """Return once ``predicate()`` is true; fail the test if it is not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.001)


def wait_for_waiter(condition: threading.Condition, timeout: float = 5.0) -> None:
    """Return once some thread is blocked in ``condition.wait()``.

    Reads CPython's ``Condition._waiters``: the only way to know that a thread is really
    blocked (and so that a later notify is what wakes it) without sleeping and hoping.
    """
    wait_until(lambda: len(condition._waiters) > 0, timeout, "a thread blocked on the condition")  # type: ignore[attr-defined]


def bounded(limit: int, what: str) -> Iterator[int]:
    """``range(limit)`` for a loop that must end by itself (with ``break`` or ``return``): a
    drain that goes on past ``limit`` rounds fails the test instead of hanging it, as one
    whose acks never remove anything would."""
    yield from range(limit)
    raise AssertionError(f"{what}: still going after {limit} rounds")
