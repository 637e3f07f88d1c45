"""Storage URIs as the ``zodburi`` package spells them: ``zeo://``, ``file://``, ``memory://``.

``AckQueue("zeo://127.0.0.1:8100")`` shares one queue database between processes through a ZEO
server. ``file://`` is the same as giving the path (and shares its one-opener-per-file
registry); every other scheme is handed to ``zodburi`` (a requirement, as ZEO is), so
any storage it knows opens the same way. ``postgresql://`` (and ``postgres://``) is RelStorage on
PostgreSQL, with the defaults and error messages of ``postgres.py``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import ZODB
from ZODB.POSException import ConflictError

from ackqueue.errors import StorageError
from ackqueue.storage import postgres
from ackqueue.storage.failures import connection_lost

log = logging.getLogger("ackqueue")

OPEN_RETRIES = 5
# How long ZEO's client waits for its server at open unless the URI's ``?wait_timeout=`` says
# (ZEO's own default), and how long a TCP connect may take before the server counts as absent.
ZEO_WAIT = 30.0
CONNECT_TIMEOUT = 3.0


shown = postgres.shown  # a URI as messages print it: its password, if any, as ***


def is_uri(path: Any) -> bool:
    """True for a string that names a storage by URI rather than a file path."""
    return isinstance(path, str) and "://" in path.split("?", 1)[0]


def as_path(path: Any) -> Any:
    """The file path (or storage URI) ``path`` names, as a str: a ``file://`` URI as its path,
    ``~`` expanded as a shell would, bytes (and ``os.PathLike`` of bytes) decoded as ``open()``
    does (``os.fsdecode``); None unchanged. Anything else is a ``TypeError`` saying what to
    give, and an empty path a ``ValueError``."""
    if path is None:
        return None
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(
            f"path must be a file path (str or os.PathLike), a storage URI, or None for a "
            f"queue in memory; not {type(path).__name__} {path!r}"
        )
    path = os.fsdecode(path)
    if not path:
        raise ValueError("path must not be empty: a file path, a storage URI, or None for a "
                         "queue in memory")
    if is_uri(path):
        if not path.startswith("file://"):
            return path
        parts = urlsplit(path)
        if parts.query:
            raise StorageError(
                f"{path}: ackqueue opens file:// storages itself; query options are not supported"
            )
        path = unquote(parts.netloc + parts.path)
    return os.path.expanduser(path)


def open_db(uri: str) -> ZODB.DB:
    """Open the database ``uri`` names, through ``zodburi``."""
    on_postgresql = postgres.is_postgresql(uri)
    try:
        import zodburi
    except ImportError:
        install = ("pip install zodburi relstorage psycopg2-binary, or pip install "
                   "'.[postgresql]' in a checkout of ackqueue" if on_postgresql
                   else "pip install zodburi")
        raise StorageError(
            f"opening {postgres.shown(uri)} needs the zodburi package, which ackqueue requires: "
            f"this environment lacks it ({install})"
        ) from None
    resolved = postgres.for_zodburi(uri) if on_postgresql else uri

    zeo_wait = announce_zeo_wait(uri)

    def failed(exc: BaseException) -> StorageError:
        if on_postgresql:
            return postgres.open_error(uri, exc)
        if zeo_wait is not None and connection_lost(exc):
            host, port = zeo_address(uri) or ("?", 0)
            return StorageError(
                f"cannot reach the ZEO server at {host}:{port}: none answered within "
                f"{zeo_wait:g} s (is it running? ?wait_timeout=SECONDS in the URI sets how long "
                f"to wait)"
            )
        return StorageError(f"cannot open storage {postgres.shown(uri)}: {exc!r}")

    try:
        factory, dbkw = zodburi.resolve_uri(resolved)
    except Exception as exc:
        if on_postgresql:
            raise failed(exc) from exc
        raise StorageError(f"cannot open storage {postgres.shown(uri)}: {exc}") from exc

    def opened() -> Any:
        try:
            return factory()
        except Exception as exc:
            raise failed(exc) from exc

    return db_on(opened, **dbkw)


def zeo_address(uri: str) -> tuple[str, int] | None:
    """The host and port of a ``zeo://host:port`` URI; None for anything else (a unix socket
    included)."""
    parts = urlsplit(uri)
    if parts.scheme != "zeo" or not parts.hostname or parts.port is None:
        return None
    return parts.hostname, parts.port


def zeo_unreachable(uri: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why nothing accepts a TCP connection at the ZEO server ``uri`` names (refused at once,
    or no answer within ``timeout`` seconds), or None if something does (or ``uri`` names no
    TCP address)."""
    address = zeo_address(uri)
    if address is None:
        return None
    try:
        with socket.create_connection(address, timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__  # socket.timeout has no strerror


def announce_zeo_wait(uri: str) -> float | None:
    """For a ``zeo://host:port`` URI, the seconds ZEO's client will wait for its server; if
    nothing answers there now, say so at once, with how long it waits and how to change that
    (ZEO waits in silence, for a server that may be starting). None for other URIs."""
    address = zeo_address(uri)
    if address is None:
        return None
    query = parse_qs(urlsplit(uri).query)
    try:
        wait = float(query.get("wait_timeout", [""])[0] or 0) or ZEO_WAIT  # ZEO: 0 is 30
    except ValueError:
        return None  # zodburi refuses the URI, saying why
    if query.get("wait", ["1"])[0].strip().lower() in ("0", "false", "no", "off"):
        return wait  # ZEO does not wait: its own error comes at once
    why = zeo_unreachable(uri, min(CONNECT_TIMEOUT, wait))
    if why is not None:
        log.warning(
            "no ZEO server answers at %s:%d yet (%s); waiting up to %g s for one to start "
            "(?wait_timeout=SECONDS in the URI sets how long)", *address, why, wait,
        )
    return wait


def db_on(open_storage: Callable[[], Any], **dbkw: Any) -> ZODB.DB:
    """A database on the storage ``open_storage()`` returns, opened again if another process
    created the root of a new database at the same moment."""
    for attempt in range(OPEN_RETRIES):
        storage = open_storage()
        try:
            return ZODB.DB(storage, **dbkw)
        except ConflictError:
            storage.close()
            if attempt == OPEN_RETRIES - 1:
                raise
        except BaseException:
            storage.close()
            raise
    raise AssertionError("unreachable")


def is_shared_storage(storage: Any) -> bool:
    """Whether other processes may write this storage at the same time as this one.

    ZEO's ClientStorage and RelStorage (and their subclasses, as ``sharedserver.py``'s) are
    the ZODB storages built for that; a FileStorage or a MappingStorage belongs to one process.
    """
    return any(
        kind.__module__.startswith(("ZEO.", "relstorage.")) for kind in type(storage).__mro__
    )
