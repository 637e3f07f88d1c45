"""The server process of ``AckQueue(path, shared=True)``: ZEO serving one queue file.

:mod:`.zeo` starts it (``python -c SERVER_MAIN``) as a process of its own; it opens the
file as a single process would (:mod:`.filestorage`), serves it on the Unix socket in the file's
private directory, packs it when due as a queue in one process does (every client's commit
passes through it), and exits once it has had no client for a while.

It serves the file it opened, which stays the file at the path until someone deletes or
replaces it. A server lingering without clients then (``ACKQUEUE_SERVER_IDLE``) must not take
the clients of a new file at the path: their commits would go into the deleted file. So it
stops at once when it finds the file replaced while it has no client, and refuses to register
a new client on a replaced file (stopping first if it has none, so that the client starts a
server for the new file). "Replaced" compares the file the storage has open with the one at
the path, under the storage's lock: a pack renames its packed copy over the file and opens it
under that lock, so a pack is never taken for a replacement.
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
from collections.abc import Callable
from typing import Any

from ackqueue.errors import QueueLockedError, StorageError
from ackqueue.records import restricted_class_factory
from ackqueue.storage.filestorage import AutoPacker, open_file_storage, remove_commit_scratch
from ackqueue.storage.zeo import (
    EXIT_FILE_LOCKED,
    IDLE_EXIT_SECONDS,
    SERVER_LOCK,
    SOCKET,
    listening,
    remove_private_dir,
)

log = logging.getLogger("ackqueue")


def _connections(server: Any) -> int:
    return sum(len(zs) for zs in server.zeo_storages_by_storage_id.values())


def serves_the_file_at(storage: Any, path: str) -> bool:
    """Whether the file ``storage`` (a FileStorage) has open is the one at ``path`` now: False
    once it was deleted, or another file was put in its place, but never during a pack (see
    the module's docstring)."""
    with storage._lock:  # a pack swaps storage._file and the file at the path under it
        opened = storage._file
        if opened is None or opened.closed:
            return True  # closing: nothing more is served
        mine = os.fstat(opened.fileno())
        try:
            there = os.stat(path)
        except FileNotFoundError:
            return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _stop() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # serve()'s handler: its finally unlinks the socket


def _watch_idle(server: Any, idle: float, replaced: Callable[[], bool]) -> None:
    """Stop the server (SIGTERM to this process) once it had no client for ``idle`` s, or
    without clients at once when its file was ``replaced()``."""
    last_busy = time.monotonic()
    while True:
        time.sleep(min(0.5, idle / 4))
        if _connections(server):
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy > idle or replaced():
            if replaced():
                log.info("the file at the path is not the one served: stopping")
            _stop()
            return


# A client holds the storage's commit lock from its vote to its finish: one stopped there
# (SIGSTOP, a debugger, a frozen VM) would hold every other process's commits for as long as it
# stays stopped. After this many seconds :class:`CommitTimeout` aborts its commit and closes its
# connection (the client sees a StorageError; nothing it committed is lost). Generous: a commit
# of a huge batch on a slow disk takes seconds, and a stopped process is reaped after its lease.
TRANSACTION_TIMEOUT = 30.0


class CommitTimeout(threading.Thread):
    """ZEO's transaction timeout, mended: a client that holds the commit lock longer than
    ``timeout`` seconds has its commit aborted, which gives the lock to the next waiting
    client, and its connection closed.

    ZEO 6.2's own ``TimeoutThread`` (runzeo's ``-t``) only closes the connection. Closing it
    from the server's side marks the protocol closed, so the connection's end is taken as
    expected and the client's commit is never aborted: the lock stays with a client that is
    gone, and every later commit of every client waits for ever (seen in this project's tests:
    a SIGSTOPped process, then a hang that nothing ended). This class has ZEO's interface
    (``begin``/``end`` from the storage's ``LockManager``, a thread); the private server
    uses it, and ``runzeo`` can be given it (docs/howto/scaling.rst, tests/zeo_server.py).
    """

    def __init__(self, timeout: float) -> None:
        super().__init__(name="ackqueue commit timeout", daemon=True)
        self.timeout = timeout
        self._cond = threading.Condition()
        self._client: Any = None
        self._deadline: float | None = None
        self._period = 0  # one more at each begin: an expiry acts on its own period only

    def begin(self, client: Any) -> None:
        """``client`` (a ZEOStorage) took the commit lock."""
        with self._cond:
            self._client = client
            self._period += 1
            self._deadline = time.monotonic() + self.timeout
            self._cond.notify()

    def end(self, client: Any) -> None:
        """``client`` released the commit lock."""
        with self._cond:
            if self._client is client:
                self._client = self._deadline = None

    def run(self) -> None:
        while True:
            with self._cond:
                while self._deadline is None:
                    self._cond.wait()
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                client, period = self._client, self._period
                self._deadline = None
            try:
                client.call_soon_threadsafe(self._expire, client, period)
            except Exception:  # its loop is closed: the connection is gone already
                log.exception("could not end the commit of a client past its timeout")

    def _expire(self, client: Any, period: int) -> None:
        """In the server's loop, as every other call on ``client``: abort its commit if it
        still holds the lock it held when the timeout ran out, then close its connection."""
        with self._cond:
            if self._client is not client or self._period != period:
                return  # finished meanwhile
        if not client.locked or client.transaction is None:
            return
        connection = client.connection
        client.log(f"commit aborted: the commit lock was held for over {self.timeout} s "
                   "(a client stopped between its vote and its finish?)", logging.CRITICAL)
        client.notify_disconnected()  # aborts its commit: the lock goes to the next waiter
        if connection is not None:
            connection.close()


def runzeo(argv: list[str] | None = None) -> None:
    """ZEO's ``runzeo`` (same options, ``sys.argv[1:]`` by default) with :class:`CommitTimeout`
    behind its ``-t``/``--timeout``: ``python -c "from ackqueue.storage.zeoserver import runzeo;
    runzeo()" -a HOST:PORT -f FILE -t 30``."""
    import ZEO.StorageServer
    from ZEO.runzeo import main as runzeo_main

    ZEO.StorageServer.TimeoutThread = CommitTimeout
    runzeo_main(argv)


# How often the server looks whether its file is worth packing (a look reads two numbers).
PACK_CHECK_SECONDS = 0.5


class _Served:
    """What :class:`AutoPacker` needs of a database, for the file the server serves without
    one: a pack to now, as a client's ``q.pack()`` asks the server for."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    def pack(self, t: float | None = None) -> None:
        from ZODB.serialize import referencesf

        self.storage.pack(time.time() if t is None else t, referencesf)


def _autopack(storage: Any, stop: threading.Event) -> None:
    """Pack the served file whenever it is due, as a queue in one process does (the clients'
    commits all pass through here, so the garbage estimate sees them); save its index as it
    grows. The estimate starts afresh with each server."""
    packer = AutoPacker(_Served(storage), lambda state: None, None)
    while not stop.wait(PACK_CHECK_SECONDS):
        try:
            if packer.due():
                packer.pack()
                log.info("packed %s: %d bytes", storage.getName(), storage.getSize())
            elif packer.index_due():
                storage.save_index()
                packer.record()
        except Exception:
            # Tried again as the file grows; a failed pack leaves the file as it was.
            packer.packed_size = storage.getSize()
            log.exception("automatic pack of %s failed", storage.getName())


def _server_class() -> Any:
    from ZEO.StorageServer import StorageServer

    class OneFileServer(StorageServer):
        """A ZEO server of one queue file that registers no client once the file at its
        path is another one (see the module's docstring)."""

        def __init__(self, sock: str, storage: Any, path: str) -> None:
            super().__init__(sock, {"1": storage}, transaction_timeout=None)
            timeout = CommitTimeout(TRANSACTION_TIMEOUT)
            timeout.start()
            self.lock_managers["1"].timeout = timeout
            self.ackqueue_path = path

        def replaced(self) -> bool:
            return not serves_the_file_at(self.storages["1"], self.ackqueue_path)

        def register_connection(self, storage_id: str, zeo_storage: Any) -> Any:
            if self.replaced():
                if not _connections(self):
                    _stop()  # the client retries, and finds no server: it starts one
                raise StorageError(
                    f"{self.ackqueue_path} was deleted or replaced since this server opened "
                    "it: close the processes that still use the old file, then open the new "
                    "one with shared=True"
                )
            return super().register_connection(storage_id, zeo_storage)

    return OneFileServer


def restrict_conflict_resolution() -> None:
    """Make ZODB's conflict resolution in this process load only what a queue file holds.

    The server never decodes items (they are bytes in their records), but to resolve a
    conflict ZODB loads the committed and new states of the record with a loader of its own
    that imports any global a record names: a crafted record of a file served here would run
    code in the server. Restricted, such a conflict stays a ``ConflictError`` for the client.
    """
    import ZODB.ConflictResolution

    def find_global(*args: Any) -> Any:
        if len(args) != 2 or not all(isinstance(arg, str) for arg in args):
            raise ZODB.ConflictResolution.BadClassName(*args)
        return restricted_class_factory(None, args[0], args[1])

    ZODB.ConflictResolution.find_global = find_global


def serve(path: str, directory: str, idle: float, durability: str) -> int:
    """Serve ``path`` on the socket in ``directory`` until idle; the process's exit status."""
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
    restrict_conflict_resolution()
    server, mine = None, None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    stop_packing = threading.Event()
    packing = threading.Thread(target=_autopack, args=(storage, stop_packing),
                               name="ackqueue-server-autopack", daemon=True)
    try:
        server = _server_class()(sock, storage, path)
        os.chmod(sock, 0o600)
        mine = os.stat(sock).st_ino
        watch = (server, idle, server.replaced)
        threading.Thread(target=_watch_idle, args=watch, daemon=True).start()
        packing.start()
        log.info("serving %s on %s (pid %d)", path, sock, os.getpid())
        server.loop()
    finally:
        with contextlib.suppress(OSError):
            if mine is not None and os.stat(sock).st_ino == mine:
                os.unlink(sock)  # first: new clients start a new server, not wait on this one
        stop_packing.set()
        if packing.is_alive():
            packing.join()  # a pack in progress finishes before the file is closed
        # Clients still registered (a SIGTERM while in use) reconnect through the private
        # directory they pinned (zeo._pinned): it must stay for the server they start.
        clients_left = _connections(server) if server is not None else 0
        if server is not None:
            server.close()
        else:
            storage.close()
        log.info("stopped serving %s", path)
        if mine is not None and not clients_left:  # a server that failed to start leaves its log
            # Beside the file stays what a queue in one process leaves once closed: the file,
            # its index and its lock. A new server opens the file only once this one has
            # exited (it waits for server.lock) or in a directory made anew after this
            # removal: neither finds its scratch file removed.
            remove_commit_scratch(path)
            logging.shutdown()  # the log file goes with the directory
            remove_private_dir(directory)
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
