"""The options every worker pool takes (threads, tasks or processes alike), checked once.

:class:`~ackqueue.workers.pool.WorkerPool`, :class:`~ackqueue.aio.pool.AsyncWorkerPool` and
:class:`~ackqueue.workers.processes.ProcessPool` share ``prefetch``, ``stop_timeout``, ``poll``
and ``log_interval``; a bad one is a ``ValueError`` saying which and what it must be, raised by
the constructor, before anything starts (a process pool would otherwise start workers that each
fail on it).
"""

from __future__ import annotations

import math
from typing import Any

from ackqueue.workers.retry import Retry


def check_pool_options(
    prefetch: int | None, stop_timeout: float, poll: float, log_interval: float
) -> None:
    if prefetch is not None and (not isinstance(prefetch, int) or prefetch < 1):
        raise ValueError(f"prefetch must be a whole number of at least 1 (or None), "
                         f"not {prefetch!r}")
    _check_seconds("stop_timeout", stop_timeout, zero=True)
    _check_seconds("poll", poll, zero=False)
    _check_seconds("log_interval", log_interval, zero=True)


def check_pool_arguments(
    handler: object, count_name: str, count: object, unit: str, retry: object
) -> None:
    """The positional arguments every pool takes: a callable handler (a ``TypeError``), a
    whole number of at least 1 of threads, tasks or processes, and a :class:`Retry` or None.
    A pool given a ``None`` handler or a negative backoff would otherwise run and retry for
    ever."""
    if not callable(handler):
        raise TypeError(f"handler must be a function taking one item, not {handler!r}")
    check_count(count_name, count, unit)
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"retry must be a Retry (ackqueue.Retry(base=..., factor=...)) or None, "
                        f"not {retry!r}")


def check_count(name: str, value: Any, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number, at least one {unit}; not {value!r}")


def default_prefetch(prefetch: int | None, workers: int, leased: bool) -> int:
    """How many items a pool of ``workers`` reads ahead: ``prefetch``, else a lease (which runs
    from the get) keeps it to what the workers reach, and without one 32 per worker."""
    return prefetch or (workers if leased else 32 * workers)


def _check_seconds(name: str, value: float, zero: bool) -> None:
    ok = isinstance(value, (int, float)) and not math.isnan(value)
    if not ok or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "more than 0"
        raise ValueError(f"{name} must be a number of seconds, {least}; not {value!r}")
