"""The PostgreSQL engine: ``AckQueue("postgresql://user:password@host:port/dbname")``.

The queue is stored by RelStorage (``pip install '.[postgresql]'`` in a checkout: RelStorage
and the psycopg2 driver) in an existing PostgreSQL database, whose tables RelStorage creates on
first use. Every process and host that opens the same URI shares the queue (shared mode).

Both spellings libpq knows, ``postgresql://`` and ``postgres://``, are accepted; the query takes
RelStorage's and zodburi's options (``?keep_history=true``, ``connect_timeout=30``, ...). Two
defaults differ from RelStorage's own, for a queue:

* ``keep_history=false``: a history-preserving database keeps every state of every item until
  someone packs it, and a queue rewrites its records at each put and ack;
* ``connect_timeout=10`` (seconds): libpq's default waits forever for a host that does not
  answer, and an open should fail with the place it tried instead.
"""

from __future__ import annotations

import getpass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import ZODB

from ackqueue.errors import StorageError
from ackqueue.storage.engine import Engine, open_through_zodburi, shown

SCHEMES = ("postgresql", "postgres")
DEFAULTS = {"keep_history": "false", "connect_timeout": "10"}
DEFAULT_PORT = 5432


def for_zodburi(uri: str) -> str:
    """``uri`` as zodburi's RelStorage resolver reads it: the ``postgres://`` scheme, the
    user, host and port spelled out (that resolver passes a missing one on as the word
    ``None``), and the queue's defaults for the options the URI does not set."""
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = {key for key, _ in query}
    query += [(key, value) for key, value in DEFAULTS.items() if key not in given]
    user, password, host, port = _addressed(uri)
    login = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
    netloc = f"{login}@{host}:{port}"
    return urlunsplit(("postgres", netloc, parts.path, urlencode(query), ""))


def _addressed(uri: str) -> tuple[str, str | None, str, int]:
    """The user, password, host and port ``uri`` names, libpq's defaults for those it does
    not (this process's user, localhost, 5432)."""
    parts = urlsplit(uri)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise StorageError(
            f"{shown(uri)}: the port is not a number; write postgresql://USER@HOST:PORT/DBNAME"
        ) from None
    user = unquote(parts.username) if parts.username else getpass.getuser()
    password = unquote(parts.password) if parts.password is not None else None
    return user, password, parts.hostname or "localhost", port


def scrubbed(text: str, uri: str) -> str:
    """``text`` (a driver's or a library's message about ``uri``) with the URI's password, as
    written and as decoded, replaced by ``***``."""
    password = urlsplit(uri).password
    if password:
        for spelling in {password, unquote(password), quote(unquote(password), safe="")}:
            text = text.replace(spelling, "***")
    return text


def where(uri: str) -> str:
    """The server, database and user ``uri`` names, as an error message says them."""
    user, _password, host, port = _addressed(uri)
    database = urlsplit(uri).path.lstrip("/") or "(none given)"
    return f"PostgreSQL server {host} port {port}, database {database!r}, user {user!r}"


def open_error(uri: str, exc: BaseException) -> StorageError:
    """The error for a PostgreSQL database that could not be opened: what went wrong, where
    it was tried, and what to do."""
    detail = scrubbed(" ".join(str(exc).split()) or repr(exc), uri)
    lowered = detail.lower()
    if isinstance(exc, ImportError) or "driver" in lowered and "available" in lowered:
        advice = ("install RelStorage and the driver: pip install relstorage psycopg2-binary (from "
                  "a checkout of ackqueue: pip install '.[postgresql]')")
    elif "does not exist" in lowered and "database" in lowered:
        advice = "create the database first (createdb NAME, or CREATE DATABASE as its owner)"
    elif "authentication" in lowered or "role" in lowered or "password" in lowered:
        advice = "check the user and password in the URI, and the server's pg_hba.conf"
    elif "keyword" in lowered or "option" in lowered:
        advice = "fix or remove the unknown option in the URI's query (after the ?)"
    elif "history" in lowered or "object_state" in lowered or "relation" in lowered:
        advice = (
            "the database holds RelStorage tables made with other options: open it with the "
            "keep_history= it was created with (the queue's default is false), or give the "
            "queue a database of its own"
        )
    elif any(word in lowered for word in ("connect", "refused", "timeout", "resolve", "host")):
        advice = (
            "start the server, or fix the host and port in the URI; a server on another host "
            "must listen on that address (listen_addresses) and let this host in (pg_hba.conf)"
        )
    else:
        advice = "see the server's log for why, or give the queue a database of its own"
    return StorageError(
        f"cannot open the queue database {shown(uri)}: tried the {where(uri)}: {detail}; "
        f"{advice}"
    )


class PostgreSQLEngine(Engine):
    """RelStorage's storages: a ``postgresql://`` URI's, or a caller's database on RelStorage
    (whatever its database)."""

    name = "postgresql"
    schemes = SCHEMES
    shared = True

    def owns(self, storage: Any) -> bool:
        # By name: RelStorage is an optional extra, and a storage of it exists only if installed.
        return any(kind.__module__.startswith("relstorage.") for kind in type(storage).__mro__)

    def open(self, where: str, durability: str) -> ZODB.DB:
        return open_through_zodburi(
            where, for_zodburi(where), lambda exc: open_error(where, exc), extra="postgresql"
        )


POSTGRESQL = PostgreSQLEngine()
