"""The storage engines' contract (:mod:`ackqueue.storage.engine`): every engine the store's
registry holds opens its databases, commits, owns the storages it opens, and does what it
declares (and nothing it does not), each on a real storage: a FileStorage file, memory, a ZEO
server (``zeo://`` and the private server of ``shared=True``), PostgreSQL through RelStorage.

A new scheme is one engine module, one line in ``Store``'s registry, and one case here.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import REPO_ROOT
from persistent.mapping import PersistentMapping
from polling import wait_until
from zeo_server import ZEOServer

import ackqueue
from ackqueue.storage import store as stores
from ackqueue.storage.engine import CACHE_BYTES, SHARED_CACHE_OBJECTS, Engine
from ackqueue.storage.filestorage import FILE
from ackqueue.storage.memory import MEMORY
from ackqueue.storage.postgresql import POSTGRESQL
from ackqueue.storage.store import ENGINES, OTHER, Store, engine_for, engine_of
from ackqueue.storage.zeo import FORGETS_IDS, ZEO


@dataclass
class Case:
    engine: Engine
    where: str  # what AckQueue is given, and the engine opens
    shared: bool | None = None  # AckQueue's shared=
    zeo_server: ZEOServer | None = None


# Each registered engine's name, as the cases below open it.
CASE_ENGINES = {
    "file": "file",
    "memory": "memory",
    "zeo": "zeo",
    "zeo-private": "zeo",  # the server that shared=True starts for a file
    "postgresql": "postgresql",
}


@pytest.fixture(params=sorted(CASE_ENGINES))
def case(request: Any, tmp_path: Any, monkeypatch: Any) -> Iterator[Case]:
    name = request.param
    path = os.path.join(tmp_path, "q.fs")
    if name == "file":
        yield Case(FILE, path)
    elif name == "memory":
        yield Case(MEMORY, "memory://")
    elif name == "zeo":
        server = ZEOServer(str(tmp_path))
        server.start()
        try:
            yield Case(ZEO, server.uri, zeo_server=server)
        finally:
            server.close()
    elif name == "zeo-private":
        monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")  # the server goes once the test is done
        yield Case(ZEO, path, shared=True)
    else:
        yield Case(POSTGRESQL, request.getfixturevalue("postgres_uri"))


@pytest.fixture
def store(case: Case) -> Iterator[Store]:
    opened = Store.acquire(case.where, None, shared=case.shared)
    try:
        yield opened
    finally:
        opened.release()


def test_every_registered_engine_has_a_case_here() -> None:
    assert sorted({engine.name for engine in ENGINES}) == sorted(set(CASE_ENGINES.values()))


def test_each_scheme_chooses_its_engine_and_an_unknown_one_goes_to_zodburi() -> None:
    schemes = [scheme for engine in ENGINES for scheme in engine.schemes]
    assert len(schemes) == len(set(schemes)), "a scheme registered by two engines"
    for engine in ENGINES:
        for scheme in engine.schemes:
            assert engine_for(f"{scheme}://somewhere") is engine
    assert engine_for("zconfig:///etc/zodb.conf") is OTHER
    assert engine_for("POSTGRES://db/jobs") is POSTGRESQL


@pytest.mark.parametrize(("where", "uri"), [
    ("zeo://127.0.0.1:9100?storage=1", True),
    ("postgresql://jobs@db/queues?connect_timeout=5&back=http://x", True),
    ("memory://", True),
    ("/srv/jobs.fs", False),
    ("relative/jobs.fs", False),
    # A file name may hold "?" (a URI's query begins there, so "://" after it is no scheme).
    ("/srv/what?from=http://elsewhere", False),
    ("/srv/a?b://c?d", False),
    ("/srv/a b://c", True),  # before any "?": a URI, whatever the spaces
])
def test_a_uri_is_told_from_a_path_by_a_scheme_before_any_query(where: str, uri: bool) -> None:
    from ackqueue.storage.engine import is_uri

    assert is_uri(where) is uri


def test_the_scheme_is_what_comes_before_the_first_separator_in_lower_case() -> None:
    from ackqueue.storage.engine import scheme_of

    assert scheme_of("ZEO://host:9100?next=file:///x") == "zeo"
    assert engine_for("ZEO://host:9100?next=file:///x") is ZEO


def test_a_file_uri_is_its_path_unquoted_and_other_uris_are_kept_as_they_are(
    tmp_path: Any,
) -> None:
    from ackqueue.storage.engine import as_path

    path = os.path.join(tmp_path, "my jobs.fs")
    assert as_path("file://" + path.replace(" ", "%20")) == path
    assert as_path("zeo://127.0.0.1:9100") == "zeo://127.0.0.1:9100"
    with ackqueue.AckQueue("file://" + path.replace(" ", "%20")) as q:
        q.put("through the URI")
    with ackqueue.AckQueue(path) as q:
        assert q.get_nowait() == "through the URI"


def test_a_uri_is_shown_without_its_password() -> None:
    from ackqueue.storage.engine import shown

    assert shown("postgresql://jobs:s3cret@db:5432/q") == "postgresql://jobs:***@db:5432/q"
    assert shown("postgresql://jobs@db/q") == "postgresql://jobs@db/q"
    assert shown("zeo://127.0.0.1:9100") == "zeo://127.0.0.1:9100"


def test_a_uris_database_options_reach_the_database_zodburi_opens() -> None:
    uri = "memory://?connection_cache_size=123&connection_cache_size_bytes=1MB"
    opened = Store.acquire(uri + "&database_name=jobs", None)
    try:
        assert opened.db.getCacheSize() == 123
        assert opened.db.getCacheSizeBytes() == 1 << 20
        assert opened.db.database_name == "jobs"
    finally:
        opened.release()
    opened = Store.acquire("memory://", None)
    try:  # without options, the cache of a database ackqueue opens (not zodburi's 10,000)
        assert opened.db.getCacheSize() == SHARED_CACHE_OBJECTS
        assert opened.db.getCacheSizeBytes() == CACHE_BYTES
    finally:
        opened.release()


def test_the_engine_opens_commits_and_owns_what_it_opened(case: Case, store: Store) -> None:
    assert store.engine is case.engine
    assert engine_of(store.db.storage) is case.engine

    def change() -> None:
        store.root()["engine-test"] = [1, 2, 3]

    store.run(change)
    conn, tm = store.open_reader()
    try:
        assert conn.root()["engine-test"] == [1, 2, 3]
    finally:
        tm.abort()
        conn.close()


def test_sync_commit_hooks_and_repair_are_there_exactly_where_declared(
    case: Case, store: Store
) -> None:
    engine, storage = case.engine, store.db.storage
    assert (engine.syncer(storage) is not None) == engine.syncs  # strict durability
    assert (store.counts is not None) == engine.commit_hooks
    assert engine.counts_in_log(storage) == engine.commit_hooks
    assert (store._repair is not None) == engine.repairs
    assert (store.packer is not None) == engine.packs
    if store.file_path is not None:
        assert os.path.samefile(store.file_path, case.where)
    else:
        assert engine is not FILE


def test_packing_works_everywhere_and_by_itself_where_declared(case: Case, store: Store) -> None:
    def rewrite(i: int) -> None:
        store.root()["garbage"] = b"x" * 20_000 + str(i).encode()

    for i in range(120):  # every revision but the last is garbage: about 2.4 MB of it
        store.run(lambda i=i: rewrite(i))
    if case.engine.packs:
        packer: Any = store.packer
        wait_until(lambda: packer.packs >= 1, 30, "the engine did not pack by itself")
    store.pack()
    conn, tm = store.open_reader()
    try:
        assert conn.root()["garbage"].endswith(b"119")
    finally:
        tm.abort()
        conn.close()
    if case.engine.packs:
        assert store.db.storage.getSize() < 200_000


def test_durability_is_the_first_openers_choice_where_this_process_fsyncs(
    case: Case, store: Store
) -> None:
    if case.engine.local_fsync:
        with pytest.raises(ackqueue.StorageError, match="durability"):
            Store.acquire(case.where, None, durability="relaxed", shared=case.shared)
    else:
        Store.acquire(case.where, None, durability="relaxed", shared=case.shared).release()


def test_shared_engines_show_one_process_the_commits_of_another_opener(
    case: Case, store: Store
) -> None:
    """``shared`` is what makes a queue run in shared mode: only an engine whose storage a
    second opener can write and read at the same time may declare it."""

    def change() -> None:
        store.root()["seen-by-others"] = True

    store.run(change)
    try:
        other = case.engine.open(case.where, "strict")
    except ackqueue.QueueLockedError:
        assert not case.engine.shared
        return
    try:
        conn = other.open()
        try:
            assert conn.root().get("seen-by-others", False) == case.engine.shared
        finally:
            conn.close()
    finally:
        other.close()
    assert stores.is_shared_storage(store.db.storage) == case.engine.shared


def test_a_dropped_connection_is_noticed_where_declared(case: Case, store: Store) -> None:
    """After its server restarts, a ZEO client must not hand out the object ids it fetched
    from the server before: the new one gives them to other clients too."""
    storage = store.db.storage
    if not case.engine.drop_notice:
        assert not getattr(storage, FORGETS_IDS, False)
        return
    if case.zeo_server is None:
        pytest.skip("restarting the private server is tests/shared/test_shared_server.py's")

    def new_object() -> None:
        store.root()["new"] = PersistentMapping()

    store.run(new_object)
    assert storage._oids, "ZEO fetched its ids in a batch"
    case.zeo_server.restart()
    wait_until(lambda: storage.is_connected() and not storage._oids, 30,
               "the client reconnected without forgetting its ids")


# -- who imports the storages ---------------------------------------------------------------------

ENGINE_MODULES = {"filestorage", "memory", "zeo", "zeoserver", "postgresql", "engine"}
STORAGE_PACKAGES = ("ZODB.FileStorage", "ZODB.MappingStorage", "ZEO", "relstorage", "zodburi")


def _imported(path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_only_the_engines_import_a_storage_implementation() -> None:
    package = os.path.join(REPO_ROOT, "ackqueue")
    wrong = {}
    for directory, _dirs, files in os.walk(package):
        for name in files:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, package)
            if not name.endswith(".py"):
                continue
            if os.path.dirname(relative) == "storage" and name[:-3] in ENGINE_MODULES:
                continue
            modules = sorted(
                m for m in _imported(path)
                if any(m == p or m.startswith(p + ".") for p in STORAGE_PACKAGES)
            )
            if modules:
                wrong[relative] = modules
    assert wrong == {}


def test_the_store_asks_the_engine_instead_of_probing_the_storage() -> None:
    with open(os.path.join(REPO_ROOT, "ackqueue", "storage", "store.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    probes = [
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
    ]
    assert probes == []


# -- how a storage's failures are told apart (ackqueue.storage.failures) -------------------------


def test_a_lost_zeo_connection_is_told_from_zeos_other_errors() -> None:
    from ZEO.Exceptions import ClientDisconnected, ClientStorageError

    from ackqueue.storage.failures import connection_lost, storage_failed

    class CutMidCall(ClientDisconnected):
        pass

    class ClientDisconnectedElsewhere(Exception):  # the name, not ZEO's class
        pass

    for lost in (ClientDisconnected("gone"), CutMidCall("gone")):
        assert connection_lost(lost) and storage_failed(lost)
    for other in (ClientStorageError("refused"), ClientDisconnectedElsewhere(), ValueError()):
        assert not connection_lost(other) and not storage_failed(other)


def test_a_database_drivers_errors_are_storage_failures_and_others_are_not() -> None:
    import sqlite3  # a DB-API driver: its errors have PEP 249's classes above them

    from ackqueue.storage.failures import driver_error, storage_failed

    class Refused(sqlite3.InterfaceError):
        pass

    # The driver's own InterfaceError and DatabaseError too, not only their subclasses:
    # psycopg2 raises InterfaceError("connection already closed") itself on a dropped link.
    for failed in (sqlite3.OperationalError("database is locked"), Refused("closed"),
                   sqlite3.InterfaceError("connection already closed"),
                   sqlite3.DatabaseError("file is not a database")):
        assert driver_error(failed) and storage_failed(failed), failed
    for other in (OSError("disk full"), ValueError("bad item"), sqlite3.Warning("odd")):
        assert not driver_error(other) and not storage_failed(other)


def test_only_zeos_last_tid_check_in_its_own_finish_is_taken_for_a_commit_that_happened() -> None:
    """ZEO issue 193 (tests/shared/test_zeo_last_tid.py plays the real race): the error of the
    client cache's check, raised where ZEO's ``tpc_finish_co`` records the new tid."""
    from ackqueue.storage.failures import committed_despite

    message = "new last tid (b'2') must be greater than previous one (b'3')"

    def tpc_finish_co() -> None:  # the frame ZEO's client raises it from
        raise ValueError(message)

    def raised(call) -> BaseException:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the error is what the test reads
            return exc
        raise AssertionError("nothing raised")

    def elsewhere() -> None:
        raise ValueError(message)

    def other_message() -> None:
        def tpc_finish_co() -> None:
            raise ValueError("invalid tid")

        tpc_finish_co()

    def other_error() -> None:
        def tpc_finish_co() -> None:
            raise RuntimeError(message)

        tpc_finish_co()

    assert committed_despite(raised(lambda: tpc_finish_co()))  # deeper in the traceback
    assert not committed_despite(raised(elsewhere))
    assert not committed_despite(raised(other_message))
    assert not committed_despite(raised(other_error))
    assert not committed_despite(ValueError(message))  # never raised: no traceback at all


def test_an_abort_with_nothing_begun_or_that_cannot_reach_the_storage_raises_nothing(
    caplog: Any,
) -> None:
    import transaction

    from ackqueue.storage.failures import abort_quietly

    class Unreachable:
        """A resource whose rollback needs a connection that is gone (RelStorage's case)."""

        def abort(self, txn: Any) -> None:
            raise OSError("connection reset by peer")

        def sortKey(self) -> str:
            return "unreachable"

    explicit = transaction.TransactionManager(explicit=True)
    abort_quietly(explicit)  # nothing begun: nothing to undo
    failing = transaction.TransactionManager(explicit=True)
    failing.begin().join(Unreachable())
    with caplog.at_level("DEBUG", logger="ackqueue"):
        abort_quietly(failing)
    assert any("connection reset by peer" in r.getMessage() for r in caplog.records)
