"""The ZEO engine: a queue database served by a ZEO server, to every process that connects.

Two ways in. ``AckQueue("zeo://host:port")`` connects to a server someone runs (through
``zodburi``). ``AckQueue(path, shared=True)`` in every process, with nothing started by hand,
connects to a private server of that file, which the first of them starts. :data:`ZEO` is the
engine the store's registry holds for both; its clients forget the object ids they fetched from
a server that went away (:func:`forget_ids_on_reconnect`).

The private server
------------------

The first process to open the file with ``shared=True`` starts a ZEO server for it: a process
of its own (:mod:`.zeoserver`, in a session of its own so that it outlives its
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

Object ids fetched before a restart
-----------------------------------

A ZEO client fetches new object ids from its server in batches and keeps the rest for later
commits. A restarted server counts on from the last id stored in its file, so it gives the ids
a client still keeps to other clients as well: two objects stored under one id, and one of them
silently lost (seen as a confirmed put never delivered, and as an acked item delivered again,
after a ZEO restart). ZEO 6 keeps the batch across a reconnect; :func:`forget_ids_on_reconnect`
drops it there.
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
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import ZODB

from ackqueue.errors import QueueLockedError, StorageError
from ackqueue.storage.engine import Engine, db_on, is_uri, open_through_zodburi, shown
from ackqueue.storage.failures import connection_lost

log = logging.getLogger("ackqueue")

IDLE_EXIT_SECONDS = 10.0
START_TIMEOUT = 30.0
# How soon a client tries again after a server refused to register it (ZEO's default is 9 s).
REGISTER_RETRY_SECONDS = 0.1
SOCKET = "zeo.sock"
START_LOCK = "start.lock"
SERVER_LOCK = "server.lock"
SERVER_LOG = "server.log"
# Every client holds a shared lock on it while it is pinned to the directory (see _pinned).
CLIENTS_LOCK = "clients.lock"
# A Unix socket's path must fit in sockaddr_un (108 bytes on Linux, with its NUL).
MAX_SOCKET_PATH = 100
# ``-m ackqueue.storage.zeoserver`` would run that module a second time (the package imports
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
    """Hold ``lock_path`` (in a private directory) exclusively. A stopping server removes its
    directory, lock files included (:func:`remove_private_dir`): a lock taken on a file that is
    no longer the one at the path is taken again, on the file there now."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            make_private_dir(os.path.dirname(lock_path))  # removed by a server that stopped
            continue
        except OSError as exc:
            raise StorageError(f"cannot open {lock_path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)


def remove_private_dir(directory: str) -> None:
    """Remove a stopped server's directory (its socket is gone, its storage closed), so that
    nothing but the queue file and its index and lock stays beside the file; unless a process
    is starting a server in it right now (it holds ``start.lock``), which then uses it, or a
    client is pinned to it (it holds ``clients.lock``) and will start its next server there."""
    try:
        fd = os.open(os.path.join(directory, START_LOCK), os.O_RDWR)
    except OSError:
        return  # not ours to tidy (gone already, or never made by a starter)
    clients = None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # a starter is using it: its new server needs it
        with contextlib.suppress(FileNotFoundError):
            clients = os.open(os.path.join(directory, CLIENTS_LOCK), os.O_RDWR | os.O_NOFOLLOW)
        if clients is not None:
            try:
                fcntl.flock(clients, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # a live client reconnects through this very directory
        for name in (SOCKET, SERVER_LOG, SERVER_LOCK, START_LOCK, CLIENTS_LOCK):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
        with contextlib.suppress(OSError):  # not empty: something else of someone's is there
            os.rmdir(directory)
    finally:
        if clients is not None:
            os.close(clients)
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

    class QuickRetryThread(ClientThread):
        """ZEO's client thread, trying again soon after a server refused to register it (a
        server of a file replaced at the path refuses, and stops: see zeoserver.py)."""

        def set_options(self, *args: Any, **kw: Any) -> None:
            super().set_options(*args, register_failed_poll=REGISTER_RETRY_SECONDS, **kw)

    class RestartingClientStorage(ClientStorage):
        """A ZEO client that starts a new server when its server goes away."""

        _ackqueue_waits_to_begin = True  # its own tpc_begin waits (see waits_to_begin)

        def __init__(self, sock: str, path: str, durability: str, **kw: Any) -> None:
            # ZEO reconnects by address whenever its server goes: through the directory
            # checked and pinned at open (see _pinned), never through whatever directory
            # another user may have put at its name since.
            self._ackqueue_dir_fd, sock = _pinned(sock)
            self._ackqueue_sock = sock
            self._ackqueue_path = path
            self._ackqueue_durability = durability
            self._ackqueue_closed = False
            # The restarter: at most one thread, running until a connection made after the
            # last disconnection (all three under the guard).
            self._ackqueue_guard = threading.Lock()
            self._ackqueue_restarting = False
            self._ackqueue_connections = 0
            self._ackqueue_lost_at = 0  # connections made when the last one was lost
            super().__init__(sock, _client_factory=QuickRetryThread, **kw)

        def notify_connected(self, conn: Any, info: Any) -> None:
            # The engine drops ids fetched from a server that died (forget_ids_on_reconnect):
            # the new one hands them out again (seen in the kill campaign as unloadable
            # buckets, lost items).
            super().notify_connected(conn, info)
            with self._ackqueue_guard:
                self._ackqueue_connections += 1

        def notify_disconnected(self) -> None:
            super().notify_disconnected()
            if self._ackqueue_closed:
                return
            with self._ackqueue_guard:
                self._ackqueue_lost_at = self._ackqueue_connections
                if self._ackqueue_restarting:
                    # The running restarter goes on until a connection made after this loss.
                    # (It once took the loss of a server killed within its last 20 ms as the
                    # one it had seen to, and ended: nobody started a server again, and every
                    # commit of the process failed for good: test_shared_open_kills in CI.)
                    return
                self._ackqueue_restarting = True
            threading.Thread(target=self._restart, name="ackqueue-server-restart",
                             daemon=True).start()

        def _restart(self) -> None:
            """Keep a server listening until this client has connected again since its last
            disconnection.

            The dying server's socket may still accept for a moment after the disconnection
            (and is_connected() says True while the notice runs): so watch the socket until a
            new connection is made, not just once."""
            sock = self._ackqueue_sock
            try:
                while True:
                    with self._ackqueue_guard:
                        if self._ackqueue_closed or (
                            self._ackqueue_connections != self._ackqueue_lost_at
                        ):
                            self._ackqueue_restarting = False
                            return
                    if not listening(sock):
                        try:
                            ensure_server(self._ackqueue_path, self._ackqueue_durability)
                        except Exception as exc:
                            log.warning("cannot restart the server of %s: %s",
                                        self._ackqueue_path, exc)
                            time.sleep(0.5)
                    time.sleep(0.02)
            except BaseException:
                with self._ackqueue_guard:
                    self._ackqueue_restarting = False
                raise

        def tpc_begin(self, txn: Any, tid: Any = None, status: str = " ") -> Any:
            # The restarter starts a new server meanwhile (see begin_when_connected).
            return begin_when_connected(
                self, lambda: super(RestartingClientStorage, self).tpc_begin(txn, tid, status),
                START_TIMEOUT, lambda: self._ackqueue_closed,
            )

        def pinned_gone(self) -> bool:
            """Whether the private directory pinned at open was removed (by its server, as it
            stopped without clients) or is no longer the one at its name: this client can then
            reach no server through it, and is to be made anew."""
            if self._ackqueue_dir_fd is None:
                return False
            try:
                pinned = os.fstat(self._ackqueue_dir_fd)
                named = os.lstat(private_dir(self._ackqueue_path))
            except OSError:
                return True
            return pinned.st_nlink == 0 or (pinned.st_dev, pinned.st_ino) != (
                named.st_dev, named.st_ino)

        def close(self) -> None:
            self._ackqueue_closed = True
            try:
                super().close()
            finally:
                if self._ackqueue_dir_fd is not None:
                    _unpin(self._ackqueue_dir_fd)
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
        # Held (shared) for as long as fd: a server that stops keeps the directory meanwhile.
        clients = os.open(CLIENTS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o600, dir_fd=fd)
        try:
            fcntl.flock(clients, fcntl.LOCK_SH)
        except BaseException:
            os.close(clients)
            raise
        _client_locks[fd] = clients
    except BaseException:
        os.close(fd)
        raise
    return fd, address


_client_locks: dict[int, int] = {}  # a pinned directory's fd -> its clients.lock fd


def _unpin(fd: int) -> None:
    """Close a directory pinned by :func:`_pinned`, and let go of its clients lock."""
    clients = _client_locks.pop(fd, None)
    if clients is not None:
        os.close(clients)
    os.close(fd)


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
            f"opening {path} with shared=True needs ZEO, which ackqueue requires: this "
            "environment lacks it (pip install ZEO)"
        ) from None
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StorageError(f"cannot open queue file {path}: directory {parent} does not exist")
    deadline = time.monotonic() + START_TIMEOUT

    def connected() -> Any:
        while True:
            sock = ensure_server(path, durability)
            storage = storage_class(
                sock, path, durability, wait=False, wait_timeout=START_TIMEOUT
            )
            try:
                if _wait_connected(storage, path, sock, durability, deadline):
                    return storage
            except BaseException:
                storage.close()
                raise
            # The server it reached stopped and removed the directory this client is pinned
            # to (a server of a file replaced at the path refuses, and stops): start afresh.
            storage.close()

    return db_on(connected, where=path)


def _wait_connected(
    storage: Any, path: str, sock: str, durability: str, deadline: float
) -> bool:
    """Wait until ``storage`` is connected, starting a server again if the one it was
    connecting to stopped meanwhile (it was idle: nobody else restarts it for a client that
    never connected); False if the directory it is pinned to is gone (a new client must be
    made, pinned to the directory made anew)."""
    while not storage.is_connected():
        if storage.pinned_gone():
            return False
        if time.monotonic() > deadline:
            raise StorageError(
                f"could not connect to the server of shared queue {path} on {sock} within "
                f"{START_TIMEOUT:.0f} s"
            )
        if not listening(sock):
            ensure_server(path, durability)
        time.sleep(0.005)
    return True


def served_by(path: str) -> bool:
    """Whether a server for ``path`` listens now (for a plain opener's error message)."""
    return listening(os.path.join(private_dir(path), SOCKET))


# -- a commit that begins while the server is away ---------------------------------------------

T = TypeVar("T")

# Set on a storage whose commits wait for its server to begin (see waits_to_begin).
WAITS_TO_BEGIN = "_ackqueue_waits_to_begin"


def begin_when_connected(
    storage: Any, begin: Callable[[], T], timeout: float, closed: Callable[[], bool]
) -> T:
    """``begin()``, a ZEO client's ``tpc_begin``; if the server is away, wait for the client to
    connect again, up to ``timeout`` seconds, and begin then.

    ZEO raises ``ClientDisconnected`` at once in ``tpc_begin`` (having sent nothing, and undone
    its own start), while its other calls, a commit already under way included, wait up to
    the client's ``wait_timeout``: so a put or an ack right after a server restart failed or
    not by chance (whether its commit needed an object id first, which waits), before the
    client had reconnected (it tries every second)."""
    from ZEO.Exceptions import ClientDisconnected

    deadline = time.monotonic() + timeout
    while True:
        try:
            return begin()
        except ClientDisconnected:
            if closed() or time.monotonic() > deadline:
                raise
            while not storage.is_connected() and time.monotonic() < deadline:
                time.sleep(0.005)


def waits_to_begin(storage: Any) -> None:
    """Make a ZEO client ``storage`` (a URI's or a caller's) begin its commits when connected,
    waiting up to its own ``wait_timeout`` (ZEO's 30 s unless the URI says), as the private
    server's clients do (see :func:`begin_when_connected`)."""
    if getattr(storage, WAITS_TO_BEGIN, False):
        return
    begin = storage.tpc_begin
    # The client's wait_timeout, kept only by its connection thread.
    timeout = float(getattr(getattr(storage, "_server", None), "timeout", ZEO_WAIT))

    def tpc_begin(txn: Any, tid: Any = None, status: str = " ") -> Any:
        return begin_when_connected(storage, lambda: begin(txn, tid, status), timeout,
                                    lambda: False)

    storage.tpc_begin = tpc_begin
    setattr(storage, WAITS_TO_BEGIN, True)


# -- object ids fetched before a restart --------------------------------------------------------

# Set on a storage once it drops its fetched ids at each connection.
FORGETS_IDS = "_ackqueue_forgets_ids"


def is_zeo_client(storage: Any) -> bool:
    return any(kind.__module__ == "ZEO.ClientStorage" for kind in type(storage).__mro__)


def forget_ids_on_reconnect(storage: Any) -> None:
    """Make a ZEO client ``storage`` (``shared=True``'s, a URI's or a caller's) drop the ids
    it fetched in advance at every new connection to its server, before any commit can use
    them.

    No lock: ZEO's ``new_oid`` holds its id lock while it waits on the server, and the notice of
    a connection comes on the thread that call waits for."""
    if getattr(storage, FORGETS_IDS, False):
        return
    connected = storage.notify_connected

    def notify_connected(conn: Any, info: Any) -> None:
        storage._oids = []
        connected(conn, info)

    storage.notify_connected = notify_connected
    setattr(storage, FORGETS_IDS, True)


# -- reaching a server by address ---------------------------------------------------------------

# How long ZEO's client waits for its server at open unless the URI's ``?wait_timeout=`` says
# (ZEO's own default), and how long a TCP connect may take before the server counts as absent.
ZEO_WAIT = 30.0
CONNECT_TIMEOUT = 3.0


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


# -- the engine -----------------------------------------------------------------------------------


class ZEOEngine(Engine):
    """ZEO's client storages: a ``zeo://`` URI's, a caller's, and the private server's of a
    file opened with ``shared=True`` (:meth:`open` with a path)."""

    name = "zeo"
    schemes = ("zeo",)
    shared = True
    drop_notice = True

    def owns(self, storage: Any) -> bool:
        # By name: ZEO is an optional extra, and a storage of it exists only if it is installed.
        return any(kind.__module__.startswith("ZEO.") for kind in type(storage).__mro__)

    def open(self, where: str, durability: str) -> ZODB.DB:
        if not is_uri(where):
            return connect(where, durability)
        wait = announce_zeo_wait(where)

        def failed(exc: BaseException) -> StorageError:
            if wait is not None and connection_lost(exc):
                host, port = zeo_address(where) or ("?", 0)
                return StorageError(
                    f"cannot reach the ZEO server at {host}:{port}: none answered within "
                    f"{wait:g} s (is it running? ?wait_timeout=SECONDS in the URI sets how "
                    f"long to wait)"
                )
            return StorageError(f"cannot open storage {shown(where)}: {exc!r}")

        try:
            return open_through_zodburi(where, failed=failed)
        except StorageError as exc:
            # Said and waited for already (``?wait_timeout=``): not a connection that dropped
            # during the open, which the queue's open would try again for shared=True's server.
            raise StorageError(str(exc)) from None

    def adopt(self, storage: Any) -> None:
        if is_zeo_client(storage):
            forget_ids_on_reconnect(storage)
            waits_to_begin(storage)

    def disown(self, storage: Any) -> None:
        """A client of a private server holds a shared ``flock`` on its ``clients.lock``, and
        a lock made by ``flock`` belongs to the open file, which a child made by fork shares:
        when the parent lets go (closes its descriptor), the child's copy kept the lock, and
        with it the stopped server's directory, for as long as the child lived. The child's
        copy is pointed at ``/dev/null``."""
        pinned = getattr(storage, "_ackqueue_dir_fd", None)  # (a private server's client)
        clients = None if pinned is None else _client_locks.pop(pinned, None)
        if clients is not None:
            null = os.open(os.devnull, os.O_RDWR)
            try:
                os.dup2(null, clients, inheritable=False)
            finally:
                os.close(null)


ZEO = ZEOEngine()
