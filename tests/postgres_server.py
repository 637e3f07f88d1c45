"""A real PostgreSQL server for tests: ``initdb`` into a temporary directory and ``pg_ctl start``
on a free port of 127.0.0.1, stopped at the end of the session.

PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` system user
that Debian's package creates (``.ci/run`` installs it), with its data directory owned by that
user; as anyone else, as that user. The binaries are looked for on PATH, then where Debian
puts them (``/usr/lib/postgresql/VERSION/bin``, not on PATH). Where there are none, or no
``postgres`` user to run them as root, the tests that need the server skip, saying why; the
psycopg2 driver is a test dependency, so its absence fails them.

This is a plugin (``pytest_plugins`` in ``tests/conftest.py``) so that the contract suite and
the tests in ``tests/shared`` share one server per session; each test gets a database of its
own from :func:`postgres_uri`. ``benchmarks/`` start one the same way.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

START_TIMEOUT = 60
SYSTEM_USER = "postgres"
SUPERUSER = "postgres"
_databases = itertools.count(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_bindir() -> str | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, or Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(on_path))

    def version(bindir: str) -> tuple[int, ...]:
        name = os.path.basename(os.path.dirname(bindir))
        return tuple(int(part) for part in name.split(".") if part.isdigit())

    found = [d for d in glob.glob("/usr/lib/postgresql/*/bin")
             if os.access(os.path.join(d, "initdb"), os.X_OK)]
    return max(found, key=version) if found else None


def why_unavailable() -> str | None:
    """Why no server can be started here, or None when one can."""
    if find_bindir() is None:
        return ("PostgreSQL's initdb and pg_ctl were not found (on PATH or in "
                "/usr/lib/postgresql/*/bin): apt-get install postgresql, as .ci/run does")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            return (f"running as root and there is no {SYSTEM_USER!r} user to run PostgreSQL "
                    "as (it refuses root): apt-get install postgresql creates it")
    return None


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, listening on 127.0.0.1:``port``."""

    def __init__(self) -> None:
        bindir = find_bindir()
        assert bindir is not None, why_unavailable()
        self.bindir = bindir
        self.port = free_port()
        # Not under pytest's basetemp: as root that is a 0700 directory the server's user
        # cannot enter.
        self.directory = tempfile.mkdtemp(prefix="ackqueue-pg-")
        self.data = os.path.join(self.directory, "data")
        self.log = os.path.join(self.directory, "server.log")
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            user = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.directory, user.pw_uid, user.pw_gid)
            self._as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def uri(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str) -> None:
        done = subprocess.run([os.path.join(self.bindir, argv[0]), *argv[1:]], cwd=self.directory,
                              capture_output=True, text=True, timeout=START_TIMEOUT, **self._as)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                               f"{done.stderr.strip()[-2000:]}; server log: {self.log}")

    def start(self) -> None:
        if not os.path.isdir(self.data):
            # Trust on 127.0.0.1 only: the server lives as long as the test session, in a
            # directory only its user can read.
            self._run("initdb", "-D", self.data, "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
                      "--no-sync")
        # fsync stays on: the tests prove what survives a kill with the server's real
        # durability. Each client process holds a few connections (RelStorage: two per ZODB
        # connection), hence more than the default 100.
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.directory} -c max_connections=300 "
                   "-c fsync=on -c synchronous_commit=on")
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w",
                  "-t", str(START_TIMEOUT), "start")

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def create_database(self, name: str) -> str:
        """A new, empty database ``name``; its URI."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=SUPERUSER,
                                dbname="postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.uri(name)

    def new_database(self) -> str:
        """A new, empty database with a name of its own; its URI."""
        return self.create_database(f"t{os.getpid()}_{next(_databases)}")

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def running() -> Iterator[PostgresServer]:
    """A started server, stopped (and its directory removed) when the block ends."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 for the session (skips where there is none)."""
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(f"no PostgreSQL: {reason}")
    with running() as server:
        yield server


@pytest.fixture
def postgres_uri(postgres_server: PostgresServer) -> str:
    """The URI of a new, empty database on the session's PostgreSQL server."""
    return postgres_server.new_database()
