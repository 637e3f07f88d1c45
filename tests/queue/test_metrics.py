"""q.metrics(): items by state, holds by owner, ages, counters, rates and ack latency; and the
Prometheus collector over it."""

from __future__ import annotations

import threading

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
