"""A queue's live figures (:meth:`AckQueue.metrics`), and a Prometheus collector for them.

``prometheus_client`` is optional (``pip install prometheus_client``, or ackqueue's ``[metrics]``
extra): a collector made without it fails at once, saying so, not when Prometheus first scrapes.

The :class:`Meter` keeps the counts and timings of one queue in this process: counters since
the queue was opened (puts, acks, nacks, dead letters), rates over the last minute, and the
time from a consumer's get to its ack: over the last acks (percentiles), and since the queue
was opened (a histogram, as Prometheus keeps one). Kept in memory, guarded by the queue's
mutex; nothing is stored.
"""

from __future__ import annotations

import bisect
import itertools
import math
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
    1,024 acks; ``ack_latency_buckets`` counts every ack since the queue was opened by those
    seconds (cumulative: ``(upper bound, acks within it)``, the last bound infinite) and
    ``ack_latency_sum`` adds them up. ``paused``: :meth:`AckQueue.pause` is in force.
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
    paused: bool = False  # q.pause(): ready items are not handed out until q.resume()
    ack_latency_buckets: tuple[tuple[float, int], ...] = ()
    ack_latency_sum: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (for JSON)."""
        return asdict(self)


def measure_locked(
    name: str, supply: Supply, holds: Holds, book: Book, meter: Meter, clock: Clock,
    paused: bool = False,
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
        paused=paused,
        ack_latency_buckets=meter.latency_histogram_locked(),
        ack_latency_sum=meter.latency_sum,
    )


class Measured(Protocol):
    def metrics(self) -> QueueMetrics: ...


class PrometheusCollector:
    """Exposes the metrics of ``queues`` (what :meth:`AckQueue.metrics` returns) to Prometheus.

    Needs ``prometheus_client`` (``pip install '.[metrics]'``)::

        from prometheus_client import REGISTRY, start_http_server
        REGISTRY.register(ackqueue.PrometheusCollector(q))
        start_http_server(8000)

    Each figure is one metric, labelled with the ``queue``'s name, as this process sees it
    (:class:`QueueMetrics`); counters count since the queue was opened in this process:

    ``ackqueue_items{queue, state}`` (gauge)
        Items by ``state``: ``ready``, ``delayed``, ``held``, ``dead`` (dead letters).
    ``ackqueue_paused{queue}`` (gauge)
        1 while the queue is paused (nothing is handed out), else 0.
    ``ackqueue_puts_total{queue}`` (counter)
        Items put.
    ``ackqueue_gets_total{queue}`` (counter)
        Items removed for good by a plain ``q.get()`` (no acknowledgement).
    ``ackqueue_settled_total{queue, outcome}`` (counter)
        Held items settled, by ``outcome``: ``acked``, ``nacked`` (given back by a consumer),
        ``dead_lettered`` (rejected, out of attempts, or impossible to load).
    ``ackqueue_next_ready_age_seconds{queue}`` (gauge)
        Seconds since the item that would be delivered next was put; absent when none is
        ready.
    ``ackqueue_oldest_held_age_seconds{queue}`` (gauge)
        Seconds since the longest-held item was got; absent when none is held.
    ``ackqueue_ack_latency_seconds{queue}`` (histogram: ``_bucket{le}``, ``_sum``, ``_count``)
        Seconds from a consumer's get to its ack, for every ack.
    """

    def __init__(self, *queues: Measured) -> None:
        try:
            import prometheus_client  # noqa: F401 - what collect() needs, checked here
        except ImportError:
            raise ImportError(
                "PrometheusCollector needs the prometheus_client package: "
                "pip install prometheus_client (or install ackqueue with its [metrics] extra)"
            ) from None
        self._queues = queues

    def collect(self) -> Iterator[Any]:
        """The metric families of every queue, as ``prometheus_client`` asks for them."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        items = GaugeMetricFamily("ackqueue_items", "Items by state", labels=["queue", "state"])
        paused = GaugeMetricFamily(
            "ackqueue_paused", "1 while the queue is paused (nothing handed out)", labels=["queue"]
        )
        puts = CounterMetricFamily("ackqueue_puts", "Items put", labels=["queue"])
        gets = CounterMetricFamily(
            "ackqueue_gets", "Items removed by a plain get (no ack)", labels=["queue"]
        )
        settled = CounterMetricFamily(
            "ackqueue_settled", "Held items settled, by outcome", labels=["queue", "outcome"]
        )
        next_ready = GaugeMetricFamily(
            "ackqueue_next_ready_age_seconds", "Seconds since the next ready item was put",
            labels=["queue"],
        )
        oldest_held = GaugeMetricFamily(
            "ackqueue_oldest_held_age_seconds", "Seconds since the oldest held item was got",
            labels=["queue"],
        )
        latency = HistogramMetricFamily(
            "ackqueue_ack_latency_seconds", "Seconds from a consumer's get to its ack",
            labels=["queue"],
        )
        for q in self._queues:
            m = q.metrics()
            for state in ("ready", "delayed", "held", "dead"):
                items.add_metric([m.name, state], getattr(m, state))
            paused.add_metric([m.name], 1 if m.paused else 0)
            puts.add_metric([m.name], m.puts)
            gets.add_metric([m.name], m.gets)
            for outcome, count in (("acked", m.acks), ("nacked", m.nacks),
                                   ("dead_lettered", m.dead_lettered)):
                settled.add_metric([m.name, outcome], count)
            if m.next_ready_age is not None:
                next_ready.add_metric([m.name], m.next_ready_age)
            if m.oldest_held_age is not None:
                oldest_held.add_metric([m.name], m.oldest_held_age)
            buckets = [(_bound(le), count) for le, count in m.ack_latency_buckets]
            latency.add_metric([m.name], buckets, m.ack_latency_sum)
        yield from (items, paused, puts, gets, settled, next_ready, oldest_held, latency)


def _bound(le: float) -> str:
    """A bucket's upper bound as Prometheus spells it."""
    return "+Inf" if le == float("inf") else repr(le)


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
