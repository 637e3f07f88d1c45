"""One queue file, several processes on one host, nothing started by hand:
``AckQueue(path, shared=True)`` in every process.

The first process to open the file this way starts a ZEO server for it: a process of its own
(:func:`main`, in a session of its own so that it outlives its
starter) serving the file on a Unix socket in a private directory beside it,
``.<name>.ackqueue/`` (mode 0700; under ``$TMPDIR/ackqueue-<uid>/`` when the path is too
long for a socket). Later openers find it listening and connect. The file stays an ordinary
queue file: once every process has let go of it, ``AckQueue(path)`` opens it in one process
again.

Lifecycle:

* **One server.** Starters take ``start.lock`` (``flock``) and look for a listening socket
  before they start one; a server takes ``server.lock`` for its whole life before it binds, so
  a new server waits for an old one to be fully gone. ``flock`` dies with its process: lock
  files and sockets left by a killed server never stop the next opener (a server removes any
  socket it finds: under ``server.lock`` no other server is alive).
* **Stops by itself** :data:`IDLE_EXIT_SECONDS` after its last client left (the
  ``ACKQUEUE_SERVER_IDLE`` environment variable of the process that starts it overrides it).
* **Restarted by its clients.** When a client's connection drops, that client starts a new
  server (the lock makes it one for all of them); ZEO clients reconnect by themselves to the
  same socket, so a commit in flight when the server died waits for the new server and then
  fails with ``ClientDisconnected`` (its outcome unknown); everything committed before is on
  disk (FileStorage fsyncs every commit).

Nobody else gets in: the directory is the owner's only (0700) and the socket 0600; a directory
or socket owned by another user or open to others is refused with an error saying what to do.
No TCP port is opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pwd
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import ZODB

from ackqueue.errors import QueueLockedError, StorageError
from ackqueue.storage.uri import db_on

log = logging.getLogger("ackqueue")

IDLE_EXIT_SECONDS = 10.0
START_TIMEOUT = 30.0
# How soon a client tries again after a server refused to register it (ZEO's default is 9 s).
REGISTER_RETRY_SECONDS = 0.1
SOCKET = "zeo.sock"
START_LOCK = "start.lock"
SERVER_LOCK = "server.lock"
SERVER_LOG = "server.log"
# A Unix socket's path must fit in sockaddr_un (108 bytes on Linux, with its NUL).
MAX_SOCKET_PATH = 100
# ``-m ackqueue.storage.sharedserver`` would run this module a second time (the package imports
# it), so the server process starts from this line instead.
SERVER_MAIN = "import sys; from ackqueue.storage.zeoserver import main; sys.exit(main())"
# Exit status of a server that found the file held by a process without shared=True.
EXIT_FILE_LOCKED = 3


# -- the private directory ----------------------------------------------------------------------


def private_dir(path: str) -> str:
    """The directory holding the socket and locks of the queue file ``path`` (absolute)."""
    directory, name = os.path.split(path)
    beside = os.path.join(directory, f".{name}.ackqueue")
    if len(os.path.join(beside, SOCKET)) <= MAX_SOCKET_PATH:
        return beside
    digest = hashlib.sha256(path.encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"ackqueue-{os.geteuid()}", digest)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_private(path: str, what: str) -> None:
    """Refuse ``path`` (a directory or socket) if another user owns it or others may use it."""
    st = os.lstat(path)
    if st.st_uid != os.geteuid():
        raise StorageError(
            f"the {what} {path} belongs to {_user(st.st_uid)}, not to this process's user "
            f"({_user(os.geteuid())}): a shared queue's server is private to its owner; run "
            "every process as that user, or give the queue a path of your own"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        fix = "chmod 700" if stat.S_ISDIR(st.st_mode) else "chmod 600"
        raise StorageError(
            f"the {what} {path} may be used by other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); a shared queue's server must be private to its "
            f"owner: if nobody else should reach it, run {fix} {path} and open the queue "
            "again (nothing in it is lost)"
        )


def make_private_dir(directory: str) -> None:
    """Create ``directory`` (and a private parent under $TMPDIR) mode 0700, or check it."""
    parent = os.path.dirname(directory)
    if os.path.basename(parent) == f"ackqueue-{os.geteuid()}":
        make_private_dir_only(parent)
    make_private_dir_only(directory)


def make_private_dir_only(directory: str) -> None:
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StorageError(
            f"cannot create {directory} for the shared queue's server: {exc.strerror}; the "
            f"directory {os.path.dirname(directory)} must be writable by this process's user"
        ) from None
    if not os.path.isdir(directory) or os.path.islink(directory):
        raise StorageError(f"{directory} is in the way of the shared queue's server: remove it")
    check_private(directory, "directory")


# -- the client side --------------------------------------------------------------------------


def listening(sock: str) -> bool:
    """Whether a server accepts connections on the Unix socket ``sock``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock)
        return True
    except OSError:
        return False
    finally:
        s.close()


@contextlib.contextmanager
def _flocked(lock_path: str) -> Iterator[int]:
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StorageError(f"cannot open {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _package_root() -> str:
    """The directory the ackqueue package is in (this file is ackqueue/storage/...)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _spawn(path: str, directory: str, durability: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    # The server runs the ackqueue its starter runs, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
    idle = env.get("ACKQUEUE_SERVER_IDLE", str(IDLE_EXIT_SECONDS))
    argv = [sys.executable, "-c", SERVER_MAIN, path, directory, "--idle", idle,
            "--durability", durability]
    log_fd = os.open(os.path.join(directory, SERVER_LOG),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log_fd,
                                stderr=log_fd, start_new_session=True, close_fds=True)
    finally:
        os.close(log_fd)


def _server_failure(path: str, directory: str, proc: subprocess.Popen[bytes]) -> StorageError:
    try:
        with open(os.path.join(directory, SERVER_LOG), errors="replace") as f:
            tail = f.read()[-2000:].strip()
    except OSError:
        tail = ""
    if proc.returncode == EXIT_FILE_LOCKED:
        return QueueLockedError(
            f"queue file {path} is open in another process without shared=True "
            f"({tail.splitlines()[-1] if tail else 'locked'}); open it with "
            f"AckQueue({path!r}, shared=True) in every process, or close that process first"
        )
    last = tail.splitlines()[-1] if tail else f"exit status {proc.returncode}"
    return StorageError(f"the server for shared queue {path} did not start: {last}")


def ensure_server(path: str, durability: str = "strict") -> str:
    """Make sure a server serves ``path``; return its socket. Starts one if none listens."""
    directory = private_dir(path)
    make_private_dir(directory)
    sock = os.path.join(directory, SOCKET)
    deadline = time.monotonic() + START_TIMEOUT
    while not listening(sock):
        with _flocked(os.path.join(directory, START_LOCK)):
            if listening(sock):
                break
            proc = _spawn(path, directory, durability)
            while not listening(sock):
                if proc.poll() is not None:
                    err = _server_failure(path, directory, proc)
                    if isinstance(err, QueueLockedError):
                        raise err
                    break  # an old server shutting down at this moment: try again
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"the server for shared queue {path} did not listen on {sock} within "
                        f"{START_TIMEOUT:.0f} s (its log: {os.path.join(directory, SERVER_LOG)})"
                    )
                time.sleep(0.005)
        if time.monotonic() > deadline:
            raise StorageError(f"could not start a server for shared queue {path}")
    check_private(sock, "socket")
    return sock


def _client_storage_class() -> Any:
    from ZEO.asyncio.client import ClientThread
    from ZEO.ClientStorage import ClientStorage
    from ZEO.Exceptions import ClientDisconnected

    class QuickRetryThread(ClientThread):
        """ZEO's client thread, trying again soon after a server refused to register it (a
        server of a file replaced at the path refuses, and stops: see zeoserver.py)."""

        def set_options(self, *args: Any, **kw: Any) -> None:
            super().set_options(*args, register_failed_poll=REGISTER_RETRY_SECONDS, **kw)

    class RestartingClientStorage(ClientStorage):
        """A ZEO client that starts a new server when its server goes away."""

        def __init__(self, sock: str, path: str, durability: str, **kw: Any) -> None:
            # ZEO reconnects by address whenever its server goes: through the directory
            # checked and pinned at open (see _pinned), never through whatever directory
            # another user may have put at its name since.
            self._ackqueue_dir_fd, sock = _pinned(sock)
            self._ackqueue_sock = sock
            self._ackqueue_path = path
            self._ackqueue_durability = durability
            self._ackqueue_closed = False
            self._ackqueue_restarting = threading.Lock()
            self._ackqueue_connections = 0
            super().__init__(sock, _client_factory=QuickRetryThread, **kw)

        def notify_connected(self, conn: Any, info: Any) -> None:
            # The Store drops ids fetched from a server that died (zeoclient.py): the new one
            # hands them out again (seen in the kill campaign as unloadable buckets, lost items).
            super().notify_connected(conn, info)
            self._ackqueue_connections += 1

        def notify_disconnected(self) -> None:
            super().notify_disconnected()
            if not self._ackqueue_closed and self._ackqueue_restarting.acquire(blocking=False):
                threading.Thread(target=self._restart, args=(self._ackqueue_connections,),
                                 name="ackqueue-server-restart", daemon=True).start()

        def _restart(self, connections: int) -> None:
            """Keep a server listening until this client has connected again.

            The dying server's socket may still accept for a moment after the disconnection
            (and is_connected() says True while the notice runs): so watch the socket until a
            new connection is made, not just once."""
            sock = self._ackqueue_sock
            try:
                while not self._ackqueue_closed and self._ackqueue_connections == connections:
                    if not listening(sock):
                        try:
                            ensure_server(self._ackqueue_path, self._ackqueue_durability)
                        except Exception as exc:
                            log.warning("cannot restart the server of %s: %s",
                                        self._ackqueue_path, exc)
                            time.sleep(0.5)
                    time.sleep(0.02)
            finally:
                self._ackqueue_restarting.release()

        def tpc_begin(self, txn: Any, tid: Any = None, status: str = " ") -> Any:
            # A commit that begins while the server is away has sent nothing yet: wait for
            # the new server instead of failing (ZEO raises at once in tpc_begin, while a
            # commit already under way waits up to wait_timeout).
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                try:
                    return super().tpc_begin(txn, tid, status)
                except ClientDisconnected:
                    if self._ackqueue_closed or time.monotonic() > deadline:
                        raise
                    while not self.is_connected() and time.monotonic() < deadline:
                        time.sleep(0.005)

        def close(self) -> None:
            self._ackqueue_closed = True
            try:
                super().close()
            finally:
                if self._ackqueue_dir_fd is not None:
                    os.close(self._ackqueue_dir_fd)
                    self._ackqueue_dir_fd = None

    return RestartingClientStorage


def _pinned(sock: str) -> tuple[int | None, str]:
    """The server's private directory opened, checked, and kept open, and the socket's
    address through that open directory (``/proc/self/fd/N/zeo.sock``).

    In a directory that others may write (no sticky bit), another user can rename the
    private directory away and put her own at its name, with her own server: a client
    reconnecting by path would send its commits there and load her pickles. Through the
    open directory the address keeps naming the directory checked here. Where /proc is
    missing, the path itself (checked at open, as before)."""
    directory = os.path.dirname(sock)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        opened, named = os.fstat(fd), os.lstat(directory)
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            raise StorageError(f"the directory {directory} of the shared queue's server was "
                               "replaced while it was being opened; open the queue again")
        check_private(directory, "directory")
        address = f"/proc/self/fd/{fd}/{SOCKET}"
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            os.close(fd)
            return None, sock
    except BaseException:
        os.close(fd)
        raise
    return fd, address


def connect(path: str, durability: str = "strict") -> ZODB.DB:
    """A database on the queue file ``path`` (absolute) served to every process of this user
    that opens it with ``shared=True``; starts the server if none runs.

    Raises :class:`~ackqueue.QueueLockedError` if a process holds the file without
    ``shared=True``, and :class:`~ackqueue.StorageError` for a private directory or socket
    that another user owns or others may use, or that cannot be created.
    """
    try:
        storage_class = _client_storage_class()
    except ImportError:
        raise StorageError(
            f"opening {path} with shared=True needs ZEO: pip install '.[zeo]' in a checkout "
            "of ackqueue"
        ) from None
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StorageError(f"cannot open queue file {path}: directory {parent} does not exist")
    sock = ensure_server(path, durability)

    def connected() -> Any:
        storage = storage_class(sock, path, durability, wait=False, wait_timeout=START_TIMEOUT)
        try:
            _wait_connected(storage, path, sock, durability)
        except BaseException:
            storage.close()
            raise
        return storage

    return db_on(connected)


def _wait_connected(storage: Any, path: str, sock: str, durability: str) -> None:
    """Wait until ``storage`` is connected, starting a server again if the one it was
    connecting to stopped meanwhile (it was idle: nobody else restarts it for a client that
    never connected)."""
    deadline = time.monotonic() + START_TIMEOUT
    while not storage.is_connected():
        if time.monotonic() > deadline:
            raise StorageError(
                f"could not connect to the server of shared queue {path} on {sock} within "
                f"{START_TIMEOUT:.0f} s"
            )
        if not listening(sock):
            ensure_server(path, durability)
        time.sleep(0.005)


def served_by(path: str) -> bool:
    """Whether a server for ``path`` listens now (for a plain opener's error message)."""
    return listening(os.path.join(private_dir(path), SOCKET))
