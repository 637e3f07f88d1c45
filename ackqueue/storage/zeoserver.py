"""The server process of ``AckQueue(path, shared=True)``: ZEO serving one queue file.

:mod:`.sharedserver` starts it (``python -c SERVER_MAIN``) as a process of its own; it opens the
file as a single process would (:mod:`.files`), serves it on the Unix socket in the file's
private directory, and exits once it has had no client for a while.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from ackqueue.errors import QueueLockedError
from ackqueue.storage.files import open_file_storage
from ackqueue.storage.sharedserver import (
    EXIT_FILE_LOCKED,
    IDLE_EXIT_SECONDS,
    SERVER_LOCK,
    SOCKET,
    listening,
)

log = logging.getLogger("ackqueue")


def _connections(server: Any) -> int:
    return sum(len(zs) for zs in server.zeo_storages_by_storage_id.values())


def _watch_idle(server: Any, idle: float) -> None:
    """Stop the server (SIGTERM to this process) once it had no client for ``idle`` s."""
    last_busy = time.monotonic()
    while True:
        time.sleep(min(0.5, idle / 4))
        if _connections(server):
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy > idle:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def serve(path: str, directory: str, idle: float, durability: str) -> int:
    """Serve ``path`` on the socket in ``directory`` until idle; the process's exit status."""
    from ZEO.StorageServer import StorageServer

    os.umask(0o177)  # the socket is created 0600
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sock = os.path.join(directory, SOCKET)
    lock_fd = os.open(os.path.join(directory, SERVER_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)  # until an old server has fully exited
    os.pwrite(lock_fd, f"{os.getpid():<16}".encode(), 0)  # one fixed-width write: never torn
    if listening(sock):
        return 0  # a server started meanwhile (cannot happen under the locks; be safe)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock)  # left by a killed server: no other server is alive now
    try:
        # As a single process opens it: torn tails repaired, an fsync every commit.
        storage = open_file_storage(path, durability=durability)
    except QueueLockedError as exc:
        print(exc, flush=True)
        return EXIT_FILE_LOCKED
    server, mine = None, None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server = StorageServer(sock, {"1": storage})
        os.chmod(sock, 0o600)
        mine = os.stat(sock).st_ino
        threading.Thread(target=_watch_idle, args=(server, idle), daemon=True).start()
        log.info("serving %s on %s (pid %d)", path, sock, os.getpid())
        server.loop()
    finally:
        with contextlib.suppress(OSError):
            if mine is not None and os.stat(sock).st_ino == mine:
                os.unlink(sock)  # first: new clients start a new server, not wait on this one
        if server is not None:
            server.close()
        else:
            storage.close()
        log.info("stopped serving %s", path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve one ackqueue file to its owner's "
                                     "processes on a Unix socket; exit when idle.")
    parser.add_argument("path")
    parser.add_argument("directory")
    parser.add_argument("--idle", type=float, default=IDLE_EXIT_SECONDS)
    parser.add_argument("--durability", default="strict")
    args = parser.parse_args(argv)
    try:
        return serve(args.path, args.directory, args.idle, args.durability)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
