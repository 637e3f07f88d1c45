"""The ``queues`` fixture: one queue factory per implementation of the queue, so that each
contract test in this folder runs, unchanged, on every one of them.

- ``memory``: ``AckQueue(None)``; queues given a name share one in-memory database of the
  test, as ``db=``, since ``None`` makes a new database per queue;
- ``file``: ``AckQueue(path)`` on a FileStorage file in the test's temporary directory;
- ``zeo``: shared mode, ``AckQueue("zeo://...")`` on a real ZEO server on 127.0.0.1 that the
  test session starts once; each test's queue names are its own, so no test sees another's;
- ``relstorage``: shared mode on RelStorage's SQLite adapter (``db=``), one database for the
  session, opened once, with names per test as on ZEO;
- ``postgresql``: shared mode, ``AckQueue("postgresql://...")`` on a real PostgreSQL server on
  127.0.0.1 (``postgres_server.py``), one database for the session, names per test as on ZEO;
  skipped, saying why, where PostgreSQL is not installed.

This is a plugin (``pytest_plugins`` in ``tests/conftest.py``), not ``tests/contracts/
conftest.py``: the tests import helpers with ``from conftest import ...``, and a second module
named ``conftest`` would take that name from the first.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
import ZODB
from polling import wait_until
from ZODB.MappingStorage import MappingStorage

import ackqueue

IMPLEMENTATIONS = ["memory", "file", "zeo", "relstorage", "postgresql"]
SHARED = {"zeo", "relstorage", "postgresql"}
BY_URI = {"zeo", "postgresql"}  # opened by the URI of a server the session started
# Shared mode gives back in a background commit: a test waits this long at most for it.
GIVE_BACK_TIMEOUT = 10.0
_test_numbers = itertools.count(1)


class Queues:
    """Opens queues of one implementation for one test, and closes them after it.

    ``queues()`` is an ``AckQueue``; ``queues(ackqueue.PriorityAckQueue, name="b",
    max_attempts=3)`` another kind, another named queue of the same database, options.
    """

    def __init__(
        self,
        implementation: str,
        directory: str,
        uri: str | None = None,
        relstorage_db: ZODB.DB | None = None,
    ) -> None:
        self.implementation = implementation
        self.shared = implementation in SHARED
        # Whether a queue closed and opened again under its name finds what it left.
        self.reopens = implementation != "memory"
        self._directory = directory
        self._uri = uri
        self._relstorage_db = relstorage_db
        self._prefix = f"t{next(_test_numbers)}-"  # this test's names in the session's database
        self._db: ZODB.DB | None = None
        self._opened: list[ackqueue.AckQueue] = []

    def __call__(
        self,
        kind: type[ackqueue.AckQueue] = ackqueue.AckQueue,
        *,
        name: str = "default",
        maxsize: int = 0,
        **options: Any,
    ) -> ackqueue.AckQueue:
        q = self._open(kind, name, maxsize, options)
        self._opened.append(q)
        if self.shared:
            assert q.shared
        return q

    def _open(
        self, kind: type[ackqueue.AckQueue], name: str, maxsize: int, options: dict[str, Any]
    ) -> ackqueue.AckQueue:
        if self.implementation == "memory":
            if name == "default":
                return kind(None, maxsize, **options)
            return kind(maxsize=maxsize, name=name, db=self._database(), **options)
        if self.implementation == "file":
            return kind(os.path.join(self._directory, "q.fs"), maxsize, name=name, **options)
        if self.implementation in BY_URI:
            assert self._uri is not None
            return kind(self._uri, maxsize, name=self._prefix + name, **options)
        assert self._relstorage_db is not None
        return kind(maxsize=maxsize, name=self._prefix + name, db=self._relstorage_db, **options)

    def _database(self) -> ZODB.DB:
        if self._db is None:
            self._db = ZODB.DB(MappingStorage())
        return self._db

    def close(self) -> None:
        for q in self._opened:
            q.close()
        if self._db is not None:
            self._db.close()


def open_relstorage(path: str) -> ZODB.DB:
    from relstorage.adapters.sqlite.adapter import Sqlite3Adapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage

    options = Options(keep_history=False)
    return ZODB.DB(RelStorage(Sqlite3Adapter(path, {}, options=options), options=options))


@pytest.fixture(scope="session")
def contracts_zeo_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ZEO server for every contract test of the session."""
    from zeo_server import ZEOServer

    server = ZEOServer(str(tmp_path_factory.mktemp("contracts-zeo")))
    server.start()
    try:
        yield server.uri
    finally:
        server.close()


@pytest.fixture(scope="session")
def contracts_postgresql_uri(postgres_server: Any) -> str:
    """One PostgreSQL database for every contract test of the session."""
    return str(postgres_server.create_database("contracts"))


@pytest.fixture(scope="session")
def contracts_relstorage_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZODB.DB]:
    """One RelStorage database (SQLite) for every contract test of the session."""
    db = open_relstorage(str(tmp_path_factory.mktemp("contracts-relstorage")))
    try:
        yield db
    finally:
        db.close()


@pytest.fixture(params=IMPLEMENTATIONS)
def queues(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Queues]:
    """A :class:`Queues` factory for each implementation of the queue."""
    implementation: str = request.param
    if implementation in BY_URI:
        factory = Queues(implementation, str(tmp_path), uri=request.getfixturevalue(
            f"contracts_{implementation}_uri"
        ))
    elif implementation == "relstorage":
        factory = Queues(implementation, str(tmp_path), relstorage_db=request.getfixturevalue(
            "contracts_relstorage_db"
        ))
    else:
        factory = Queues(implementation, str(tmp_path))
    try:
        yield factory
    finally:
        factory.close()


def take_given_back(queues: Queues, c: ackqueue.Consumer, expected: list[Any]) -> None:
    """Take the ``expected`` items, just given back, with ``c``: in their order, or in shared
    mode in any order.

    Shared mode commits a give-back that cannot commit where it happens (a consumer's close,
    its thread's end, a rolled-back transaction, a lapsed lease) on the session thread moments
    later (docs/howto/scaling.rst); until then the next ready item is handed
    out in its stead, and no public call waits for that commit. So there blocking gets take the
    items as they come back, and only which items came back is checked.
    """
    got = [c.get(timeout=GIVE_BACK_TIMEOUT) for _ in expected]
    if queues.shared:
        assert sorted(map(repr, got)) == sorted(map(repr, expected))
    else:
        assert got == expected


def settled(q: ackqueue.AckQueue, ready: int, held: int, dead: int | None = None) -> None:
    """Wait until ``q`` counts ``ready`` items ready and ``held`` held (and ``dead`` dead).

    In shared mode ``qsize()`` is an estimate over all processes (docs/howto/scaling.rst):
    it catches up with this process's own commits moments later, and a give-back that cannot
    commit where it happens (a thread ends, a lease runs out) is committed by the session
    thread. Elsewhere the counts are exact and this returns at once.
    """

    def counts() -> tuple[int, ...]:
        found = (q.qsize(), q.unacked_count())
        return found if dead is None else (*found, q.dead_count())

    expected = (ready, held) if dead is None else (ready, held, dead)
    wait_until(
        lambda: counts() == expected,
        GIVE_BACK_TIMEOUT,
        f"(ready, held, dead) == {expected}, not {counts()}",
    )
