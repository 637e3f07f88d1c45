"""A queue's live figures (:meth:`AckQueue.metrics`), and a Prometheus collector for them.

``prometheus_client`` is optional (``pip install '.[metrics]'``): the collector imports it only
when it is asked to collect.

The :class:`Meter` keeps the counts and timings of one queue in this process: counters since
the queue was opened (puts, acks, nacks, dead letters), rates over the last minute, and the
time from a consumer's get to its ack over the last acks. Kept in memory, guarded by the
queue's mutex; nothing is stored.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ackqueue.base.clock import Clock
from ackqueue.delivery.holds import Holds
from ackqueue.delivery.supply import GetAgain, Supply
from ackqueue.storage.book import Book


@dataclass(frozen=True)
class QueueMetrics:
    """One queue as this process sees it, when :meth:`AckQueue.metrics` was called.

    ``ready``, ``delayed``, ``held`` and ``dead`` count items by state (in shared mode
    ``ready`` is an estimate and ``held`` counts this process's holds). Ages are seconds:
    ``next_ready_age`` since the item that would be delivered next was put,
    ``oldest_held_age`` since the longest-held item was got. The counters (``puts``,
    ``gets`` for plain gets, ``acks``, ``nacks``, ``dead_lettered``) count this process's
    operations since the queue was opened (a plain get counts once claimed); the rates are
    over the last minute;
    ``ack_latency_p50``/``p99`` are seconds from a consumer's get to its ack over the last
    1,024 acks.
    """

    name: str
    ready: int
    delayed: int
    held: int
    dead: int
    held_by_owner: dict[str, int]
    next_ready_age: float | None
    oldest_held_age: float | None
    puts: int
    gets: int
    acks: int
    nacks: int
    dead_lettered: int
    puts_per_second: float
    acks_per_second: float
    ack_latency_p50: float | None
    ack_latency_p99: float | None
    uptime: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_locked(
    name: str, supply: Supply, holds: Holds, book: Book, meter: Meter, clock: Clock
) -> QueueMetrics:
    """The figures of one queue (the caller holds its mutex). Items are stamped by the
    queue's ``clock`` when put, by the wall clock when got."""
    now = time.time()
    by_owner: dict[str, int] = {}
    oldest_got: float | None = None
    for owner, delivery, _age in holds.listing_locked():
        by_owner[owner] = by_owner.get(owner, 0) + 1
        if oldest_got is None or delivery.got_at < oldest_got:
            oldest_got = delivery.got_at
    try:
        head = supply.head()
        next_put = None if head is None else book.put_at(head)
    except (KeyError, GetAgain):
        next_put = None  # taken by another process meanwhile
    rates = meter.rates_locked()
    return QueueMetrics(
        name=name,
        ready=len(supply),
        delayed=len(supply.delays),
        held=holds.count,
        dead=book.dead_count(),
        held_by_owner=by_owner,
        next_ready_age=None if next_put is None else max(0.0, clock() - next_put),
        oldest_held_age=None if oldest_got is None else max(0.0, now - oldest_got),
        puts=meter.puts,
        gets=meter.gets,
        acks=meter.acks,
        nacks=meter.nacks,
        dead_lettered=meter.dead,
        puts_per_second=rates.puts_per_second,
        acks_per_second=rates.acks_per_second,
        ack_latency_p50=meter.latency_locked(0.5),
        ack_latency_p99=meter.latency_locked(0.99),
        uptime=time.monotonic() - meter.opened,
    )


class Measured(Protocol):
    def metrics(self) -> QueueMetrics: ...


class PrometheusCollector:
    """Exposes the metrics of ``queues`` to Prometheus::

        from prometheus_client import REGISTRY, start_http_server
        REGISTRY.register(ackqueue.PrometheusCollector(q))
    """

    def __init__(self, *queues: Measured) -> None:
        self._queues = queues

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        items = GaugeMetricFamily(
            "ackqueue_items", "Items by state", labels=["queue", "state"]
        )
        ops = CounterMetricFamily(
            "ackqueue_operations", "Operations since the queue was opened", labels=["queue", "op"]
        )
        ages = GaugeMetricFamily(
            "ackqueue_age_seconds", "Age of the next ready and the oldest held item",
            labels=["queue", "of"],
        )
        latency = GaugeMetricFamily(
            "ackqueue_ack_latency_seconds", "Seconds from get to ack over the last acks",
            labels=["queue", "quantile"],
        )
        for q in self._queues:
            m = q.metrics()
            for state in ("ready", "delayed", "held", "dead"):
                items.add_metric([m.name, state], getattr(m, state))
            for op in ("puts", "gets", "acks", "nacks", "dead_lettered"):
                ops.add_metric([m.name, op], getattr(m, op))
            for of, age in (("next_ready", m.next_ready_age), ("oldest_held", m.oldest_held_age)):
                if age is not None:
                    ages.add_metric([m.name, of], age)
            for quantile, value in (("0.5", m.ack_latency_p50), ("0.99", m.ack_latency_p99)):
                if value is not None:
                    latency.add_metric([m.name, quantile], value)
        yield from (items, ops, ages, latency)


RATE_WINDOW = 60.0  # seconds the rates are measured over
LATENCIES = 1024  # how many recent acks the latency percentiles are taken from


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
        self._samples: deque[tuple[float, int, int]] = deque()

    def put_locked(self, n: int) -> None:
        self.puts += n
        self._sample()

    def got_locked(self) -> None:
        self.gets += 1

    def acked_locked(self, held_for: float) -> None:
        self.acks += 1
        self._latencies.append(max(0.0, held_for))
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

    def latency_locked(self, fraction: float) -> float | None:
        """The ``fraction`` percentile (0.5: median) of get-to-ack seconds, or None."""
        if not self._latencies:
            return None
        ordered = sorted(self._latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
