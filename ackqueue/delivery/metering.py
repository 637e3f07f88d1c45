"""Counts and timings of one queue in this process, for :meth:`AckQueue.metrics`.

Counters since the queue was opened (puts, acks, nacks, dead letters), rates over the last
minute, and the time from a consumer's get to its ack: over the last acks (percentiles), and
since the queue was opened (a histogram, as Prometheus keeps one). Kept in memory, guarded by
the queue's mutex; nothing is stored.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass

RATE_WINDOW = 60.0  # seconds the rates are measured over
LATENCIES = 1024  # how many recent acks the latency percentiles are taken from
# Upper bounds (seconds) of the get-to-ack histogram's buckets: from a no-op handler's
# milliseconds to an hour-long job.
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
                   900.0, 3600.0)


@dataclass(frozen=True)
class Rates:
    puts_per_second: float
    acks_per_second: float


class Meter:
    def __init__(self) -> None:
        self.opened = time.monotonic()
        self.puts = 0
        self.gets = 0  # plain gets (removed at once)
        self.acks = 0
        self.nacks = 0
        self.dead = 0  # rejected, out of attempts or unloadable, in this process
        self._latencies: deque[float] = deque(maxlen=LATENCIES)
        self._in_bucket = [0] * (len(LATENCY_BUCKETS) + 1)  # the last: above every bound
        self.latency_sum = 0.0
        self._samples: deque[tuple[float, int, int]] = deque()

    def put_locked(self, n: int) -> None:
        self.puts += n
        self._sample()

    def got_locked(self) -> None:
        self.gets += 1

    def acked_locked(self, held_for: float) -> None:
        self.acks += 1
        held_for = max(0.0, held_for)
        self._latencies.append(held_for)
        self._in_bucket[bisect.bisect_left(LATENCY_BUCKETS, held_for)] += 1
        self.latency_sum += held_for
        self._sample()

    def nacked_locked(self) -> None:
        self.nacks += 1

    def buried_locked(self, n: int = 1) -> None:
        self.dead += n

    def _sample(self) -> None:
        """Remember the counters at most once a second, for the last RATE_WINDOW seconds."""
        now = time.monotonic()
        samples = self._samples
        if not samples or now - samples[-1][0] >= 1.0:
            samples.append((now, self.puts, self.acks))
        while len(samples) > 1 and now - samples[0][0] > RATE_WINDOW:
            samples.popleft()

    def rates_locked(self) -> Rates:
        now = time.monotonic()
        if self._samples:
            since, puts, acks = self._samples[0]
        else:
            since, puts, acks = self.opened, 0, 0
        elapsed = max(now - since, 1e-9)
        return Rates((self.puts - puts) / elapsed, (self.acks - acks) / elapsed)

    def latency_histogram_locked(self) -> tuple[tuple[float, int], ...]:
        """Cumulative counts of acks by get-to-ack seconds: ``(bound, acks within it)`` for
        each of LATENCY_BUCKETS, then ``(inf, every ack)``."""
        counts = itertools.accumulate(self._in_bucket)
        return tuple(zip((*LATENCY_BUCKETS, math.inf), counts, strict=True))

    def latency_locked(self, fraction: float) -> float | None:
        """The ``fraction`` percentile (0.5: median) of get-to-ack seconds, or None."""
        if not self._latencies:
            return None
        ordered = sorted(self._latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
