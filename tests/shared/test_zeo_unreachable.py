"""``zeo://`` with no server there: the open says at once what it waits for and how long, and
fails with a StorageError naming the address once that wait is over (``?wait_timeout=SECONDS``
sets it). ZEO's client once waited 30 s in silence, then raised its own ClientDisconnected."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time

import pytest
from polling import wait_until
from zeo_server import ZEOServer, free_port, zeo_server  # noqa: F401 - the fixture

import ackqueue


def test_nothing_listening_is_a_storage_error_naming_the_address_after_the_wait_given(caplog):
    port = free_port()  # bound and let go: nothing listens there
    caplog.set_level(logging.WARNING, logger="ackqueue")
    started = time.monotonic()
    with pytest.raises(ackqueue.StorageError) as raised:
        ackqueue.AckQueue(f"zeo://127.0.0.1:{port}?wait_timeout=1")
    took = time.monotonic() - started
    said = str(raised.value)
    assert f"cannot reach the ZEO server at 127.0.0.1:{port}: none answered within 1 s" in said
    assert "?wait_timeout=SECONDS" in said
    assert took < 15, took  # the wait asked for, not ZEO's 30 s
    told = [r.getMessage() for r in caplog.records if f"127.0.0.1:{port}" in r.getMessage()]
    assert len(told) == 1 and "waiting up to 1 s for one to start" in told[0], told


def test_an_open_that_waits_for_a_server_says_so_at_once_and_goes_on_when_it_starts(
    tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="ackqueue")
    server = ZEOServer(str(tmp_path))  # its port chosen, the server not started yet
    opened: list[ackqueue.AckQueue[str]] = []
    opener = threading.Thread(target=lambda: opened.append(ackqueue.AckQueue(server.uri)))
    try:
        opener.start()
        wait_until(lambda: any(f"127.0.0.1:{server.port} yet" in r.getMessage()
                               for r in caplog.records),
                   timeout=10, what="the log line saying what the open waits for")
        (said,) = [r.getMessage() for r in caplog.records if "ZEO server" in r.getMessage()]
        assert "waiting up to 30 s" in said and "?wait_timeout=SECONDS" in said
        assert opener.is_alive() and not opened  # it waits; it did not fail
        server.start()
        opener.join(timeout=60)
        (q,) = opened
        with q:
            q.put("after the server came up")
            assert q.get(timeout=10) == "after the server came up"
    finally:
        opener.join(timeout=60)
        server.close()



def test_a_commit_right_after_a_restart_waits_for_the_client_to_connect_again(
    zeo_server,  # noqa: F811
):
    """ZEO's client raises ClientDisconnected at once in tpc_begin while it is not connected
    (it tries to reconnect every second after its server went), where its other calls wait
    up to wait_timeout. A commit whose first word to the server is its tpc_begin (no new
    object id to fetch: a pause, or a put whose sequence block ran out, which is how an
    asyncio pool's test met it in CI) failed right after a restart instead of waiting. A
    client storage of the caller's, as a ``zeo://`` URI's, goes through the engine's adopt."""
    from ZEO.ClientStorage import ClientStorage
    from ZODB import DB

    storage = ClientStorage(zeo_server.addr, wait_timeout=20)
    with ackqueue.AckQueue(db=DB(storage)) as q:
        q.put("before")
        zeo_server.stop(signal.SIGKILL)
        wait_until(lambda: not storage.is_connected(), timeout=30,
                   what="the client to see its server gone")
        zeo_server.start()
        q.pause()  # a commit of the queue's record alone: tpc_begin is its first call
        assert storage.is_connected()
        q.resume()
        assert q.get(timeout=10) == "before"


# The first item's handler kills the server before it returns: the pool's ack of it then meets
# no server, for sure (a get while the server is gone meets it only if something is ready).
def test_a_worker_pool_goes_on_after_its_server_restarts(zeo_server, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING, logger="ackqueue")
    handled: list[str] = []

    def handle(item: str) -> None:
        if item == "before":
            zeo_server.stop(signal.SIGKILL)
        handled.append(item)

    # wait_timeout: how long a call waits for the server before it fails (ZEO's 30 s default
    # would make the test wait as long for the failure it is about).
    uri = f"{zeo_server.uri}?wait_timeout=3"
    with ackqueue.AckQueue(uri, session_timeout=30) as q:
        pool = ackqueue.WorkerPool(q, handle, threads=2, poll=0.05)
        runner = threading.Thread(target=pool.run)
        runner.start()
        try:
            q.put("before")
            wait_until(lambda: any("ack failed, trying again" in r.getMessage()
                                   for r in caplog.records),
                       timeout=60, what="the ack failing for want of the server")
            zeo_server.start()
            q.put("after")
            wait_until(lambda: handled == ["before", "after"], timeout=60,
                       what="the pool to handle an item put after the restart")
            wait_until(lambda: pool.stats.done == 2, timeout=60, what="both acks")
            assert runner.is_alive(), "the pool stopped"
        finally:
            pool.stop()
            runner.join(timeout=60)
        assert pool.stats.stopped_by == "stop()"
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_an_asyncio_worker_pool_goes_on_after_its_server_restarts(zeo_server, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING, logger="ackqueue")
    handled: list[str] = []

    async def handle(item: str) -> None:
        if item == "before":
            await asyncio.to_thread(zeo_server.stop, signal.SIGKILL)
        handled.append(item)

    async def wait_for(check, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)  # polling, with a deadline

    async def main() -> None:
        uri = f"{zeo_server.uri}?wait_timeout=3"  # as in the thread pool's test above
        async with ackqueue.AsyncAckQueue(uri, session_timeout=30) as q:
            pool = ackqueue.AsyncWorkerPool(q, handle, concurrency=2, poll=0.05)
            running = asyncio.create_task(pool.run())
            try:
                await q.put("before")
                await wait_for(lambda: any("ack failed, trying again" in r.getMessage()
                                           for r in caplog.records),
                               "the ack failing for want of the server")
                await asyncio.to_thread(zeo_server.start)
                await q.put("after")
                await wait_for(lambda: handled == ["before", "after"],
                               "the pool to handle an item put after the restart")
                await wait_for(lambda: pool.stats.done == 2, "both acks")
                assert not running.done(), "the pool stopped"
            finally:
                pool.stop()
                stats = await asyncio.wait_for(running, 60)
            assert stats.stopped_by == "stop()"
            assert q.qsize() == 0

    asyncio.run(main())


# The handler kills the server and fails its only item, whose burial then meets no server. It
# stays held by the pool: given up, run_until_empty() would wait for it forever.
def test_a_burial_that_meets_no_server_is_tried_again_once_it_is_back(zeo_server, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING, logger="ackqueue")

    def kill_the_server_and_fail(item: str) -> None:
        zeo_server.stop(signal.SIGKILL)
        raise ValueError(f"cannot handle {item!r}")

    uri = f"{zeo_server.uri}?wait_timeout=3"
    with ackqueue.AckQueue(uri, session_timeout=30) as q:
        q.put("poison")
        pool = ackqueue.WorkerPool(
            q, kill_the_server_and_fail, threads=2, retry=ackqueue.Retry(max_attempts=1),
            poll=0.05,
        )
        runner = threading.Thread(target=pool.run_until_empty)
        runner.start()
        try:
            wait_until(lambda: any("nack or burial failed, trying again" in r.getMessage()
                                   for r in caplog.records),
                       timeout=60, what="the burial failing for want of the server")
            zeo_server.start()
            runner.join(timeout=60)
            assert not runner.is_alive(), "run_until_empty() did not return"
        finally:
            pool.stop()
            runner.join(timeout=60)
        assert pool.stats.stopped_by is None and pool.stats.dead == 1
        assert [d.item for d in q.dead_letters()] == ["poison"]
        assert q.qsize() == 0 and q.unacked_count() == 0


def test_an_asyncio_pool_tries_a_burial_that_meets_no_server_again(zeo_server, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING, logger="ackqueue")

    async def kill_the_server_and_fail(item: str) -> None:
        await asyncio.to_thread(zeo_server.stop, signal.SIGKILL)
        raise ValueError(f"cannot handle {item!r}")

    async def main() -> None:
        uri = f"{zeo_server.uri}?wait_timeout=3"
        async with ackqueue.AsyncAckQueue(uri, session_timeout=30) as q:
            await q.put("poison")
            pool = ackqueue.AsyncWorkerPool(
                q, kill_the_server_and_fail, concurrency=2,
                retry=ackqueue.Retry(max_attempts=1), poll=0.05,
            )
            running = asyncio.create_task(pool.run_until_empty())
            try:
                deadline = time.monotonic() + 60
                while not any("nack or burial failed, trying again" in r.getMessage()
                              for r in caplog.records):
                    assert time.monotonic() < deadline, "the burial did not fail"
                    await asyncio.sleep(0.02)  # polling, with a deadline
                await asyncio.to_thread(zeo_server.start)
                stats = await asyncio.wait_for(asyncio.shield(running), 60)
            finally:
                pool.stop()
                await asyncio.wait_for(running, 60)
            assert stats.stopped_by is None and stats.dead == 1
            assert [d.item for d in await q.dead_letters()] == ["poison"]
            assert q.qsize() == 0 and q.unacked_count() == 0

    asyncio.run(main())


@pytest.mark.parametrize("holding", [False, True], ids=["nothing held", "an item held"])
def test_a_queue_closed_while_its_server_is_down_is_let_go_and_opens_again(
    zeo_server: ZEOServer, holding: bool  # noqa: F811
) -> None:
    """Closing a queue that took items, while its server is down: a close that committed
    (a taker's unmark, found by a review the day it was added) raised before it closed the
    book and let the store go, so the ZEO client thread ran on and the queue could not be
    opened again in the process ("already open in this process"). A close must not fail for
    the server: what it held comes back once its session lapses, as after a kill."""
    uri = zeo_server.uri + "?wait_timeout=2"
    q = ackqueue.AckQueue(uri, session_timeout=2.0)
    q.put_many([1, 2, 3])
    c = q.connect()
    c.ack(c.get(timeout=10))  # a taker of the queue now
    if holding:
        c.get(timeout=10)
    zeo_server.stop(signal.SIGKILL)
    try:
        q.close()
    finally:
        zeo_server.start()
    assert q.closed
    wait_until(
        lambda: not [t for t in threading.enumerate() if str(zeo_server.port) in t.name],
        10, "the store let go (its ZEO client thread ended)",
    )
    again = ackqueue.AckQueue(uri, session_timeout=2.0)  # not "already open in this process"
    with again, again.connect() as c:
        assert sorted(c.get(timeout=30) for _ in range(2)) == [2, 3]
