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


def test_prometheus_collector_exposes_items_and_operations(qpath):
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    with ackqueue.AckQueue(qpath, name="jobs") as q:
        registry.register(ackqueue.PrometheusCollector(q))
        q.put_many([1, 2, 3])
        with q.connect() as c:
            c.ack(c.get())
            text = prometheus_client.generate_latest(registry).decode()
            assert 'ackqueue_items{queue="jobs",state="ready"} 2.0' in text
            assert 'ackqueue_items{queue="jobs",state="held"} 0.0' in text
            assert 'ackqueue_operations_total{op="acks",queue="jobs"} 1.0' in text
            assert "ackqueue_ack_latency_seconds" in text
