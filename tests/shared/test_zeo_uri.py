"""Opening queues by storage URI (zeo://, file://, memory://) and on a caller's ZEO database,
and the shared-mode behaviour two ZEO clients see: wake-ups, give-backs, dead letters."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import ZEO
from campaign_children import env_at, start_child
from conftest import REPO_ROOT
from polling import bounded, wait_for_waiter, wait_until
from zeo_server import ZEOServer, zeo_server  # noqa: F401 - the fixture

import ackqueue


def test_zeo_uri_opens_a_shared_queue_seen_by_a_db_opened_by_the_caller(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    db = ZEO.DB(zeo_server.addr)
    try:
        with ackqueue.AckQueue(zeo_server.uri) as by_uri, ackqueue.AckQueue(db=db) as by_db:
            assert by_uri.shared and by_db.shared
            by_uri.put({"url": "http://example.org/"})
            with by_db.connect() as c:
                item = c.get(timeout=10)
                assert item == {"url": "http://example.org/"}
                with pytest.raises(ackqueue.Empty):
                    by_uri.get(timeout=0.2)  # held by the other client, not ready
                c.ack(item)
    finally:
        db.close()


def test_file_uri_is_the_same_file_as_its_path(tmp_path) -> None:
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(f"file://{path}") as q:
        assert not q.shared
        q.put("a")
    with ackqueue.AckQueue(path) as q:
        assert q.get(timeout=1) == "a"


def test_memory_uri_is_a_private_in_memory_queue() -> None:
    with ackqueue.AckQueue("memory://") as q:
        assert not q.shared
        q.put(1)
        assert q.get(timeout=1) == 1


def test_an_unknown_scheme_is_a_clear_storage_error() -> None:
    with pytest.raises(ackqueue.StorageError, match="nosuch://x"):
        ackqueue.AckQueue("nosuch://x")


def test_shared_false_keeps_holds_in_memory_on_zeo(zeo_server: ZEOServer) -> None:  # noqa: F811
    with ackqueue.AckQueue(zeo_server.uri, shared=False) as q:
        assert not q.shared
        q.put(1)
        assert q.get(timeout=1) == 1


def two_clients(
    server: ZEOServer, a_timeout: float | None = None, **options: object
) -> tuple[ackqueue.AckQueue, ...]:
    """Two queues on one ZEO server in two ZODB clients: as two processes see it."""
    db = ZEO.DB(server.addr)
    a = ackqueue.AckQueue(server.uri, ack_timeout=a_timeout, **options)  # type: ignore[arg-type]
    b = ackqueue.AckQueue(db=db, **options)  # type: ignore[arg-type]
    b._test_db = db  # type: ignore[attr-defined]
    return a, b


def close_clients(*queues: ackqueue.AckQueue) -> None:
    for q in queues:
        q.close()
        db = getattr(q, "_test_db", None)
        if db is not None:
            db.close()


def test_a_get_blocked_in_one_client_wakes_when_another_puts(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    a, b = two_clients(zeo_server)
    try:
        got: list[object] = []

        def consume() -> None:
            got.append(b.get(timeout=30))

        t = threading.Thread(target=consume)
        t.start()
        wait_for_waiter(b.not_empty, timeout=30)  # blocked before the other client puts
        put_at = time.monotonic()
        a.put("wake up")
        t.join(timeout=30)
        woke_after = time.monotonic() - put_at
        assert got == ["wake up"]
        # Measured: tens of ms (bench_zeo.py measures it). Wide for a loaded machine, and far
        # below the get's timeout, so the put is what woke it.
        assert woke_after < 10, woke_after
    finally:
        close_clients(a, b)


def test_items_given_back_in_one_client_are_delivered_by_the_other(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    a, b = two_clients(zeo_server, a_timeout=0.5)
    try:
        a.put_many(["nacked", "closed", "timed out"])
        c = a.connect()
        first, second, third = c.get(timeout=10), c.get(timeout=10), c.get(timeout=10)
        assert (first, second, third) == ("nacked", "closed", "timed out")
        c.extend(second, 60)  # only the third's lease runs out
        other = b.connect()
        c.nack(first)
        assert other.get(timeout=10) == "nacked"
        assert other.get(timeout=10) == "timed out"
        with pytest.raises(ackqueue.LeaseExpiredError):
            c.ack(third)
        c.close()
        assert other.get(timeout=10) == "closed"
        assert b.unacked_count() == 3
        other.close()
    finally:
        close_clients(a, b)


def test_max_attempts_counts_deliveries_in_every_client(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    a, b = two_clients(zeo_server, max_attempts=2)
    try:
        a.put("poison")
        with a.connect() as c:
            c.nack(c.get(timeout=10))
        with b.connect() as c:
            item = c.get(timeout=10)
            assert c.delivery(item).attempts == 2
            c.nack(item)
            with pytest.raises(ackqueue.Empty):
                c.get(timeout=0.3)
        assert [d.item for d in a.dead_letters()] == ["poison"]
    finally:
        close_clients(a, b)


def test_consumers_and_plain_gets_in_two_clients_deliver_each_item_once(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    a, b = two_clients(zeo_server)
    items = list(range(200))
    got: list[int] = []
    lock = threading.Lock()

    def consume_with_acks() -> None:
        with a.connect() as c:
            for _ in bounded(100_000, "consuming with acks"):
                try:
                    item = c.get(timeout=1)
                except ackqueue.Empty:
                    return
                with lock:
                    got.append(item)
                c.ack(item)

    def consume_plainly() -> None:
        for _ in bounded(100_000, "consuming with plain gets"):
            try:
                item = b.get(timeout=1)
            except ackqueue.Empty:
                return
            with lock:
                got.append(item)

    try:
        a.put_many(items)
        threads = [threading.Thread(target=f) for f in [consume_with_acks, consume_plainly] * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # None lost, none twice: a take and a removal of one item always conflict, although
        # the removal only reads the take's mark (without the entry write they both commit).
        assert sorted(got) == items
    finally:
        close_clients(a, b)


def test_a_plain_get_in_a_rolled_back_transaction_leaves_the_item_for_every_client(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    a, b = two_clients(zeo_server)
    try:
        a.put("job")
        with pytest.raises(RuntimeError), a.transaction():
            assert a.get(timeout=10) == "job"
            raise RuntimeError("roll back")
        with b.transaction():  # given back durably: the other client gets it
            assert b.get(timeout=10) == "job"
        # Committed: gone for good, in every client.
        for q in (a, b):
            with pytest.raises(ackqueue.Empty):
                q.get(timeout=0.3)
    finally:
        close_clients(a, b)


def test_object_ids_fetched_before_a_server_restart_are_not_used_after_it(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    # A ZEO client fetches object ids in batches; a restarted server hands out again every id
    # past the file's last one, so ids a client kept across the restart were given to another
    # client too: its next commits store new objects under ids that name other objects.
    db = ZEO.DB(zeo_server.addr)
    try:
        with ackqueue.AckQueue(db=db) as first:
            first.put("first-0")
            zeo_server.restart()
            wait_until(db.storage.is_connected, 10, "the client to reconnect")
            with ackqueue.AckQueue(zeo_server.uri) as second, first.connect() as c:
                second.put_many([f"second-{n}" for n in range(40)])
                # The first client loads what the second stored, under the reused ids.
                taken = c.get_many(100, timeout=10)
                for n in range(1, 21):
                    first.put(f"first-{n}")
                c.ack_many(taken)
    finally:
        db.close()
    with ackqueue.AckQueue(zeo_server.uri) as q, q.connect() as c:
        left = c.get_many(100, timeout=10)
        c.ack_many(left)
    assert sorted(taken + left) == sorted(
        [f"first-{n}" for n in range(21)] + [f"second-{n}" for n in range(40)])


def test_a_read_cut_by_a_server_restart_is_tried_again_once_the_client_reconnects(
    zeo_server: ZEOServer,  # noqa: F811
) -> None:
    # A load in flight when the server dies fails with ZEO's ClientDisconnected; a read changes
    # nothing, so it waits for the reconnection and is tried again instead of failing. The
    # dead letters are records the first client never loaded: listing them loads each from
    # the server, held in flight by stopping the server first.
    db = ZEO.DB(zeo_server.addr)
    try:
        with ackqueue.AckQueue(db=db) as first:
            with ackqueue.AckQueue(zeo_server.uri) as second, second.connect() as c:
                second.put_many([f"item-{n}" for n in range(3)])
                for item in c.get_many(3, timeout=10):
                    c.reject(item, reason="poison")
            wait_until(lambda: first.dead_count() == 3, 10,
                       "the first client to see the dead letters")
            assert zeo_server.proc is not None
            zeo_server.proc.send_signal(signal.SIGSTOP)
            listed: list[object] = []

            def list_dead() -> None:
                try:
                    listed.append(first.dead_letters())
                except BaseException as exc:  # noqa: BLE001 - reported below
                    listed.append(exc)

            reader = threading.Thread(target=list_dead)
            reader.start()
            reader.join(0.5)
            assert reader.is_alive(), f"the read did not wait on the stopped server: {listed}"
            zeo_server.stop(signal.SIGKILL)
            zeo_server.start()
            reader.join(60)
            assert not reader.is_alive()
            assert len(listed) == 1 and isinstance(listed[0], list), listed
            assert sorted(dead.item for dead in listed[0]) == ["item-0", "item-1", "item-2"]
    finally:
        db.close()


HOLDER = r"""
import os, sys, time
import ackqueue
q = ackqueue.AckQueue(sys.argv[1], session_timeout=float(sys.argv[2]))
c = q.connect()
item = c.get(timeout=10)
print("open", flush=True)
for _ in range(6000):  # until the test says so (at most 60 s)
    if os.path.exists(sys.argv[3]):
        break
    time.sleep(0.01)
try:
    c.ack(item)
    print("acked", item, flush=True)
except Exception as exc:
    print("failed", repr(exc), flush=True)
c.close()
q.close()
"""


def test_a_server_outage_longer_than_the_lease_does_not_make_live_processes_look_dead(
    zeo_server: ZEOServer, tmp_path,  # noqa: F811
) -> None:
    # A renewal waiting for a load (its cached records were changed just before) waits for the
    # server to come back rather than failing. The first such renewal on the new server must
    # not take the holder's lapse in server time, which includes the outage, for death: it
    # came late itself, so it gives the others a whole lease from then. The holder is stopped
    # until a second after the restart (a slow reconnection).
    holder_lease = 4.0
    go = str(tmp_path / "ack now")
    db = ZEO.DB(zeo_server.addr)
    holder = None
    try:
        with ackqueue.AckQueue(db=db, session_timeout=1.0) as b, b.connect() as cb:
            b.put("held")
            holder = start_child(HOLDER, [zeo_server.uri, str(holder_lease), go],
                                 env_at(REPO_ROOT))
            holder.send_signal(signal.SIGSTOP)
            with ackqueue.AckQueue(zeo_server.uri):
                pass  # a session registered and ended: b's cached sessions tree is stale
            seen = ZEO.DB(zeo_server.addr)
            last = seen.storage.lastTransaction()
            seen.close()
            wait_until(lambda: db.storage.lastTransaction() >= last, 10,
                       "b to see the last commit")
            zeo_server.stop(signal.SIGKILL)
            time.sleep(holder_lease + 1.0)  # the outage: longer than the holder's lease
            zeo_server.start()
            time.sleep(1.0)
            holder.send_signal(signal.SIGCONT)
            with pytest.raises(ackqueue.Empty):
                cb.get(timeout=holder_lease / 2)  # the holder renews within its first second
            open(go, "w").close()
            out, _ = holder.communicate(timeout=60)
            assert out.split() == ["acked", "held"], out  # still held: no LeaseExpiredError
    finally:
        if holder is not None and holder.poll() is None:
            holder.send_signal(signal.SIGCONT)
            holder.kill()
            holder.wait()
        db.close()
