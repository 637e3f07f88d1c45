"""q.metrics(): items by state, holds by owner, ages, counters, rates and ack latency; and the
Prometheus collector over it."""

from __future__ import annotations

import threading
import time

import pytest
from polling import wait_until

import ackqueue


@pytest.fixture(params=[False, True], ids=["local", "shared"])
def shared(request) -> bool:
    return request.param


def test_metrics_count_items_by_state_and_operations(qpath, shared):
    clock = ackqueue.ManualClock(1_000_000.0)
    with ackqueue.AckQueue(qpath, shared=shared, max_attempts=5, clock=clock) as q:
        q.put_many(["a", "b", "c", "d", "e"])
        q.put("later", delay=60)
        assert q.get() == "a"
        c = q.connect()
        held = c.get()
        c.ack(held)
        kept = c.get()
        nacked = c.get()
        c.nack(nacked)
        rejected = c.get()
        assert rejected == "d"
        c.reject(rejected, reason="bad")
        # In shared mode ``ready`` is an estimate from the store, which catches up with this
        # process's give-backs moments later (the session's watcher refreshes it).
        wait_until(lambda: q.metrics().ready == 1, timeout=10, what="ready caught up")
        m = q.metrics()
        assert (m.ready, m.delayed, m.held, m.dead) == (1, 1, 1, 1)
        assert m.held_by_owner == {threading.current_thread().name: 1}
        assert (m.puts, m.gets, m.acks, m.nacks, m.dead_lettered) == (6, 1, 1, 1, 1)
        assert m.ack_latency_p50 is not None and m.ack_latency_p50 >= 0
        assert m.oldest_held_age is not None and m.oldest_held_age >= 0
        assert m.puts_per_second > 0 and m.acks_per_second > 0
        assert m.as_dict()["name"] == "default"
        c.ack(kept)
        assert q.metrics().held == 0


def test_next_ready_age_is_measured_from_the_put(qpath):
    clock = ackqueue.ManualClock(1_000_000.0)
    with ackqueue.AckQueue(qpath, clock=clock) as q:
        assert q.metrics().next_ready_age is None
        q.put("x")
        clock.advance(30)
        assert q.metrics().next_ready_age == 30


def test_metrics_of_a_closed_queue_is_an_error(qpath):
    q = ackqueue.AckQueue(qpath)
    q.close()
    with pytest.raises(ackqueue.QueueClosedError):
        q.metrics()


def test_prometheus_collector_follows_prometheus_conventions(qpath):
    """Counters end in _total, one metric per meaning with queue/state/outcome labels, ages
    are gauges in seconds, the ack latency a histogram in seconds; each metric has help."""
    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    registry = prometheus_client.CollectorRegistry()
    with ackqueue.AckQueue(qpath, name="jobs", max_attempts=5) as q:
        registry.register(ackqueue.PrometheusCollector(q))
        q.put_many([1, 2, 3, 4, 5])
        assert q.get() == 1
        with q.connect() as c:
            c.ack(c.get())
            c.nack(c.get())
            c.reject(c.get(), reason="bad")
            held = c.get()
            q.pause()
            text = prometheus_client.generate_latest(registry).decode()
            c.ack(held)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {
        "ackqueue_items", "ackqueue_paused", "ackqueue_puts", "ackqueue_gets",
        "ackqueue_settled", "ackqueue_next_ready_age_seconds",
        "ackqueue_oldest_held_age_seconds", "ackqueue_ack_latency_seconds",
    }
    kinds = {name: f.type for name, f in families.items()}
    assert kinds["ackqueue_puts"] == kinds["ackqueue_gets"] == kinds["ackqueue_settled"] == (
        "counter")
    assert kinds["ackqueue_ack_latency_seconds"] == "histogram"
    assert all(kinds[n] == "gauge" for n in families if n.endswith("_age_seconds"))
    assert all(f.documentation for f in families.values())
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    jobs = (("queue", "jobs"),)
    assert samples[("ackqueue_items", (("queue", "jobs"), ("state", "held")))] == 1
    assert samples[("ackqueue_items", (("queue", "jobs"), ("state", "dead")))] == 1
    assert samples[("ackqueue_paused", jobs)] == 1
    assert samples[("ackqueue_puts_total", jobs)] == 5
    assert samples[("ackqueue_gets_total", jobs)] == 1
    for outcome in ("acked", "nacked", "dead_lettered"):
        assert samples[("ackqueue_settled_total", (("outcome", outcome), ("queue", "jobs")))] == 1
    assert samples[("ackqueue_oldest_held_age_seconds", jobs)] >= 0
    assert samples[("ackqueue_next_ready_age_seconds", jobs)] >= 0
    assert samples[("ackqueue_ack_latency_seconds_count", jobs)] == 1
    assert samples[("ackqueue_ack_latency_seconds_bucket", (("le", "+Inf"), ("queue", "jobs")))
                   ] == 1
    assert samples[("ackqueue_ack_latency_seconds_sum", jobs)] >= 0
    assert not any("quantile" in dict(labels) or "op" in dict(labels) for _, labels in samples)


def test_ack_latency_histogram_counts_every_ack_in_its_bucket(qpath):
    clock = ackqueue.ManualClock(1_000_000.0)
    with ackqueue.AckQueue(qpath, clock=clock) as q:
        q.put_many(range(3))
        with q.connect() as c:
            for _ in range(3):
                c.ack(c.get())
        m = q.metrics()
    buckets = dict(m.ack_latency_buckets)
    assert buckets[float("inf")] == 3 == m.acks
    counts = [count for _, count in m.ack_latency_buckets]
    assert counts == sorted(counts)  # cumulative
    assert buckets[60.0] == 3 and 0 <= m.ack_latency_sum < 60


def test_metrics_count_each_operation_and_the_holds_of_each_owner(qpath):
    with ackqueue.AckQueue(qpath, max_attempts=5) as q:
        m = q.metrics()
        assert (m.puts_per_second, m.acks_per_second) == (0, 0)  # nothing happened yet
        q.put_many(["a", "b", "c", "d", "e", "f", "g"])
        assert [q.get(), q.get()] == ["a", "b"]
        c = q.connect()
        held = [c.get() for _ in range(5)]
        assert q.metrics().held_by_owner == {threading.current_thread().name: 5}
        c.nack(held[0])
        c.nack(held[1])
        c.reject(held[2], reason="bad")
        c.reject(held[3], reason="bad")
        m = q.metrics()
        assert (m.puts, m.gets, m.nacks, m.dead_lettered) == (7, 2, 2, 2)
        c.close()


def test_ages_and_uptime_start_at_zero_and_grow_from_there(qpath):
    clock = ackqueue.ManualClock(1_000_000.0)
    opened = time.monotonic()
    with ackqueue.AckQueue(qpath, clock=clock) as q:
        q.put("x")
        m = q.metrics()
        assert m.next_ready_age == 0  # put just now, by the queue's clock
        assert 0 <= m.uptime <= time.monotonic() - opened
        with q.connect() as c:
            before = time.time()
            c.get()
            m = q.metrics()
            assert m.oldest_held_age is not None
            assert 0 <= m.oldest_held_age <= time.time() - before


def test_rates_are_what_happened_since_the_first_sample_over_the_time_since(qpath):
    def rate_bounds(first, since_first_returned, before_metrics, after_metrics):
        """One operation after the first (which is the sample): at most one over the time
        between them, at least one over the whole span."""
        return 1 / (after_metrics - first), 1 / (before_metrics - since_first_returned)

    with ackqueue.AckQueue(qpath) as q:
        start = time.monotonic()
        q.put("a")  # this process's first sample: one put
        after_first = time.monotonic()
        q.put("b")
        before = time.monotonic()
        m = q.metrics()
        low, high = rate_bounds(start, after_first, before, time.monotonic())
        assert low <= m.puts_per_second <= high
        assert m.acks_per_second == 0
    with ackqueue.AckQueue(qpath) as q, q.connect() as c:
        a, b = c.get(), c.get()
        start = time.monotonic()
        c.ack(a)  # opened again: the first sample is this ack
        after_first = time.monotonic()
        c.ack(b)
        before = time.monotonic()
        m = q.metrics()
        low, high = rate_bounds(start, after_first, before, time.monotonic())
        assert low <= m.acks_per_second <= high
        assert m.puts_per_second == 0


def test_ack_latency_percentiles_and_sum_are_those_of_the_acks(qpath):
    with ackqueue.AckQueue(qpath) as q, q.connect() as c:
        q.put_many(range(3))
        before_gets = time.time()
        held = [c.get() for _ in range(3)]
        after_gets = time.time()
        spans = []  # each ack's latency is at most its span
        for item, wait in zip(held, (0.0, 0.2, 0.4), strict=True):
            wait_until(lambda w=wait: time.time() - after_gets >= w, what=f"{wait} s held")
            c.ack(item)
            spans.append(time.time() - before_gets)
        m = q.metrics()
    assert m.ack_latency_p50 is not None and 0.2 <= m.ack_latency_p50 <= spans[1]
    assert m.ack_latency_p99 is not None and 0.4 <= m.ack_latency_p99 <= spans[2]
    assert 0.6 <= m.ack_latency_sum <= sum(spans)


def test_ack_latency_percentiles_are_over_the_last_1024_acks(qpath):
    """11 slow acks, 1,019 quick ones, 5 slow ones: of the last 1,024 the 99th percentile is a
    quick one (5 slow are under 1 %), while over all 1,035 it, or the slowest, would be slow."""
    with ackqueue.AckQueue(qpath) as q, q.connect() as c:
        q.put_many(range(1035))
        slow = c.get_many(16)
        got = time.time()
        wait_until(lambda: time.time() - got >= 1.0, what="a second held")
        c.ack_many(slow[:11])
        started = time.time()
        c.ack_many(c.get_many(1019))
        quick = time.time() - started
        c.ack_many(slow[11:])
        m = q.metrics()
    assert m.acks == 1035
    assert m.ack_latency_p99 is not None and m.ack_latency_p99 <= quick < 1.0
    assert m.ack_latency_p50 is not None and m.ack_latency_p50 <= quick


def test_prometheus_shows_a_running_queue_unpaused_and_every_bucket_by_its_bound(qpath):
    prometheus_client = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    registry = prometheus_client.CollectorRegistry()
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        registry.register(ackqueue.PrometheusCollector(q))
        q.put("job")
        with q.connect() as c:
            c.ack(c.get())
        text = prometheus_client.generate_latest(registry).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("ackqueue_paused", (("queue", "jobs"),))] == 0
    bounds = [dict(labels)["le"] for name, labels in samples
              if name == "ackqueue_ack_latency_seconds_bucket"]
    assert bounds[-1] == "+Inf" and len(set(bounds)) == len(bounds) == 15
    assert samples[("ackqueue_ack_latency_seconds_bucket", (("le", "60.0"), ("queue", "jobs")))
                   ] == 1


def test_the_put_rate_is_over_the_samples_of_the_last_minute_not_only_the_last_second(qpath):
    with ackqueue.AckQueue(qpath) as q:
        start = time.monotonic()
        q.put("a")  # the first sample: one put
        after_first = time.monotonic()
        q.put("b")
        wait_until(lambda: time.monotonic() - after_first >= 1.05, what="a second gone by")
        q.put("c")  # a second sample, a second after the first: both kept
        before = time.monotonic()
        m = q.metrics()
        after = time.monotonic()
    # two puts since the first sample, over the time since it
    assert 2 / (after - start) <= m.puts_per_second <= 2 / (before - after_first)
