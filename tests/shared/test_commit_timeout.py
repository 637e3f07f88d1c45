"""A client that holds a ZEO server's commit lock past the transaction timeout (a process stopped
between its vote and its finish) has its commit aborted, and the other clients commit again.

ZEO 6.2's own timeout only closed the client's connection: the lock stayed with a client that
was gone and every later commit waited for ever (a CI run hung so, in test_zeo_fencing).
ackqueue's ``CommitTimeout`` serves the private server of ``shared=True`` and, through
``ackqueue.storage.zeoserver.runzeo()``, the runzeo of these tests and of docs/howto/scaling.rst.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import transaction
import ZODB
from ZEO.ClientStorage import ClientStorage
from ZEO.Exceptions import ClientDisconnected
from zeo_server import ZEOServer
from ZODB.Connection import TransactionMetaData
from ZODB.MappingStorage import MappingStorage

from ackqueue.storage import zeoserver

TIMEOUT = 1.0  # the server's -t, in seconds


@pytest.fixture
def quick_server(tmp_path) -> Iterator[ZEOServer]:
    server = ZEOServer(str(tmp_path), transaction_timeout=TIMEOUT)
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_a_commit_lock_held_past_the_timeout_goes_to_the_next_client(quick_server, tmp_path):
    stuck = ClientStorage(quick_server.addr, wait_timeout=30)
    other = ZODB.DB(ClientStorage(quick_server.addr, wait_timeout=30))
    try:
        # As a process stopped between its vote and its finish: the lock is held, nothing more.
        meta = TransactionMetaData()
        stuck.tpc_begin(meta)
        stuck.tpc_vote(meta)
        committed = threading.Event()

        def commit() -> None:
            manager = transaction.TransactionManager()
            conn = other.open(manager)
            conn.root()["after"] = 1
            manager.commit()
            conn.close()
            committed.set()

        threading.Thread(target=commit, daemon=True).start()
        # ZEO 6.2's own timeout: still waiting when the test gives up.
        assert committed.wait(TIMEOUT + 20), "the other client's commit waited for ever"
        log = (tmp_path / "zeo.log").read_text()
        assert "commit aborted" in log, log[-2000:]
        # The stuck client's commit was aborted, not finished: it cannot report success.
        with pytest.raises(ClientDisconnected):
            stuck.tpc_finish(meta)
    finally:
        stuck.close()
        other.close()


def test_a_commit_that_finishes_in_time_is_left_alone(quick_server):
    db = ZODB.DB(ClientStorage(quick_server.addr, wait_timeout=30))
    try:
        for n in range(3):  # each commit begins and ends a timeout period
            with db.transaction() as conn:
                conn.root()["n"] = n
        # A period that ended is never expired later: a commit made after the timeout ran
        # out for an earlier one still finishes.
        threading.Event().wait(TIMEOUT * 1.5)
        with db.transaction() as conn:
            conn.root()["n"] = 3
        with db.transaction() as conn:
            assert conn.root()["n"] == 3
    finally:
        db.close()


def test_the_private_server_uses_the_mended_timeout(tmp_path):
    server = zeoserver._server_class()(str(tmp_path / "sock"), MappingStorage(), "unused")
    try:
        timeout = server.lock_managers["1"].timeout
        assert isinstance(timeout, zeoserver.CommitTimeout)
        assert timeout.timeout == zeoserver.TRANSACTION_TIMEOUT
        assert timeout.is_alive()
    finally:
        server.close()
