"""``AckQueue(path, shared=True)``: several processes on one host share a queue file through a
server that the first of them starts (``ackqueue/storage/zeo.py``), with real
processes, real SIGKILL, real permissions.

The servers these tests start stop themselves one second after their last client leaves
(``ACKQUEUE_SERVER_IDLE``, inherited by every child).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest
from campaign_children import server_pid
from conftest import alive, child_argv, child_env, spawn_child, stored_items
from polling import wait_until

import ackqueue
from ackqueue.storage import zeo as sharedserver

IDLE = "1"


@pytest.fixture(autouse=True)
def quick_idle_exit(monkeypatch):
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", IDLE)


def wait_gone(pid: int, timeout: float = 15.0) -> None:
    wait_until(lambda: not alive(pid), timeout, f"process {pid} to exit")


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def tcp_inodes() -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                found.add(line.split()[9])
    return found


PUT_AND_PRINT_PID = """
import sys, ackqueue
if sys.argv[3:] == ["wait"]:
    sys.stdin.readline()  # opens when told to, at the same moment as the others
q = ackqueue.AckQueue(sys.argv[1], shared=True, session_timeout=5)
q.put(sys.argv[2])
print("put", flush=True)
sys.stdin.readline()
q.close()
"""


def test_two_processes_share_a_file_through_a_private_server_they_start(short_qpath) -> None:
    qpath = short_qpath  # the private directory beside the file: see the fixture
    child = spawn_child(PUT_AND_PRINT_PID, qpath, "from the child")
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "put"
        pid = server_pid(qpath)
        assert pid not in (os.getpid(), child.pid) and alive(pid)
        with ackqueue.AckQueue(qpath, shared=True, session_timeout=5) as q, q.connect() as c:
            assert q.shared
            item = c.get(timeout=10)
            assert item == "from the child"
            c.ack(item)
            assert server_pid(qpath) == pid  # the same server, found, not a second one
            directory = sharedserver.private_dir(qpath)
            sock = os.path.join(directory, sharedserver.SOCKET)
            assert os.path.dirname(directory) == os.path.dirname(qpath)
            assert os.stat(directory).st_mode & 0o777 == 0o700
            assert os.stat(sock).st_mode & 0o777 == 0o600
            sockets = socket_inodes(pid)
            assert sockets, "the server has no socket at all"
            assert not sockets & tcp_inodes(), "the server opened a TCP socket"
    finally:
        child.communicate("done\n", timeout=30)
    assert child.returncode == 0
    wait_gone(pid)  # stops by itself once its last client left
    assert not os.path.exists(sock)
    with ackqueue.AckQueue(qpath) as q:  # an ordinary queue file again, nothing left in it
        assert q.qsize() == 0


def test_the_server_outlives_its_starter_and_a_killed_server_comes_back(qpath) -> None:
    child = spawn_child(PUT_AND_PRINT_PID, qpath, "first")
    assert child.stdout is not None and child.stdout.readline().strip() == "put"
    pid = server_pid(qpath)
    child.send_signal(signal.SIGKILL)  # the process that started the server
    child.wait(30)
    with ackqueue.AckQueue(qpath, shared=True, session_timeout=5) as q:
        assert server_pid(qpath) == pid and alive(pid)
        q.put("second")
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        # The client that saw its server go starts a new one by itself, and reconnects.
        wait_until(lambda: server_pid(qpath) != pid and sharedserver.served_by(qpath), 30,
                   "a new server")
        q.put("third")
        got = [q.get(timeout=10) for _ in range(3)]
    assert got == ["first", "second", "third"]


def test_stale_socket_and_locks_of_a_killed_server_never_stop_the_next_opener(qpath) -> None:
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("kept")
        pid = server_pid(qpath)
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
    directory = sharedserver.private_dir(qpath)
    assert os.path.exists(os.path.join(directory, sharedserver.SOCKET))  # left behind
    assert os.path.exists(qpath + ".lock")
    out = subprocess.run(
        child_argv(
            "import sys, ackqueue\n"
            "with ackqueue.AckQueue(sys.argv[1], shared=True) as q: print(q.get(timeout=10))",
            qpath,
        ),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "kept"


def test_processes_opening_at_once_end_up_with_one_server(qpath) -> None:
    children = [spawn_child(PUT_AND_PRINT_PID, qpath, str(n), "wait") for n in range(4)]
    try:
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "put"
        pid = server_pid(qpath)
        servers = [
            p for p in os.listdir("/proc") if p.isdigit() and _runs_server_for(int(p), qpath)
        ]
        assert servers == [str(pid)]
    finally:
        for child in children:
            child.communicate("done\n", timeout=30)
    assert [c.returncode for c in children] == [0] * 4
    wait_gone(pid)
    with ackqueue.AckQueue(qpath) as q:
        assert sorted(q.get_nowait() for _ in range(4)) == ["0", "1", "2", "3"]


def _runs_server_for(pid: int, path: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return sharedserver.SERVER_MAIN.encode() in argv and path.encode() in argv


HOLD_PLAIN = """
import sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1])
q.put("plain")
print("open", flush=True)
sys.stdin.readline()
q.close()
"""


def test_a_shared_opener_of_a_plainly_open_file_is_told_what_to_do(qpath) -> None:
    child = spawn_child(HOLD_PLAIN, qpath)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
        with pytest.raises(ackqueue.QueueLockedError) as shared_err:
            ackqueue.AckQueue(qpath, shared=True)
        with pytest.raises(ackqueue.QueueLockedError) as plain_err:
            ackqueue.AckQueue(qpath)
    finally:
        child.communicate("done\n", timeout=30)
    assert "without shared=True" in str(shared_err.value)
    assert f"AckQueue({qpath!r}, shared=True) in every process" in str(shared_err.value)
    # The plain opener's error says exactly how to open a file from several processes.
    assert f"AckQueue({qpath!r}, shared=True) in every process" in str(plain_err.value)
    with ackqueue.AckQueue(qpath, shared=True) as q:
        assert q.get(timeout=10) == "plain"  # nothing lost


PLAIN_OPEN = """
import sys, ackqueue
try:
    ackqueue.AckQueue(sys.argv[1])
except ackqueue.QueueLockedError as exc:
    print(exc)
"""


def test_a_plain_opener_of_a_shared_file_is_told_to_use_shared_mode(qpath) -> None:
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("shared")
        out = subprocess.run(child_argv(PLAIN_OPEN, qpath), env=child_env(),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "opened it with shared=True" in out.stdout
        assert f"AckQueue({qpath!r}, shared=True) here too" in out.stdout
        assert q.get(timeout=10) == "shared"  # nothing lost, still served


def test_a_socket_others_may_use_is_refused_until_put_right(qpath) -> None:
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("kept")
        sock = os.path.join(sharedserver.private_dir(qpath), sharedserver.SOCKET)
        os.chmod(sock, 0o666)
        out = subprocess.run(child_argv(OPEN_SHARED, qpath), env=child_env(),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "mode 0666" in out.stdout and f"chmod 600 {sock}" in out.stdout
        os.chmod(sock, 0o600)
        assert q.get(timeout=10) == "kept"  # nothing lost


OPEN_SHARED = """
import sys, ackqueue
try:
    ackqueue.AckQueue(sys.argv[1], shared=True).close()
    print("opened")
except ackqueue.StorageError as exc:
    print(exc)
"""


def test_a_private_directory_others_may_enter_is_refused(qpath) -> None:
    directory = sharedserver.private_dir(qpath)
    os.mkdir(directory, 0o755)
    os.chmod(directory, 0o755)
    with pytest.raises(ackqueue.StorageError, match=r"mode 0755.*chmod 700"):
        ackqueue.AckQueue(qpath, shared=True)
    assert not os.path.exists(qpath)  # refused before anything was created
    os.chmod(directory, 0o700)
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("fine now")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changes owners and users: needs root")


@needs_root
def test_a_server_directory_of_another_user_is_refused(qpath) -> None:
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("mine")
    directory = sharedserver.private_dir(qpath)
    nobody = 65534
    os.chown(directory, nobody, nobody)
    # Root could connect anyway: the check is ackqueue's own, not the kernel's.
    with pytest.raises(ackqueue.StorageError, match="belongs to nobody"):
        ackqueue.AckQueue(qpath, shared=True)
    os.chown(directory, 0, 0)
    with ackqueue.AckQueue(qpath, shared=True) as q:
        assert q.get(timeout=10) == "mine"


AS_NOBODY = """
import os, socket, sys, ackqueue
import ZEO.ClientStorage  # imported as root: the interpreter's files are root's
from ackqueue.storage import zeo as sharedserver
os.setgid(65534)
os.setuid(65534)
base, queue_sock, control_sock = sys.argv[1], sys.argv[2], sys.argv[3]
os.listdir(base)  # the parent is open to nobody: only the private directory stands in the way
for sock in (control_sock, queue_sock):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sock)
        print("connected", flush=True)
    except PermissionError:
        print("refused", flush=True)
    finally:
        s.close()
for path in (os.path.join(base, "q.fs"), os.path.join(base, "new.fs")):
    try:
        ackqueue.AckQueue(path, shared=True)
        print("opened", flush=True)
    except ackqueue.StorageError as exc:
        print(exc, flush=True)
"""


@needs_root
def test_another_user_cannot_connect_or_open_and_is_told_why() -> None:
    base = tempfile.mkdtemp(prefix="ackqueue-others-")  # /tmp is open to every user
    try:
        os.chmod(base, 0o755)
        qpath = os.path.join(base, "q.fs")
        control_path = os.path.join(base, "control.sock")
        control = socket.socket(socket.AF_UNIX)
        control.bind(control_path)
        control.listen()
        os.chmod(control_path, 0o777)
        with ackqueue.AckQueue(qpath, shared=True) as q:
            q.put("private")
            sock = os.path.join(sharedserver.private_dir(qpath), sharedserver.SOCKET)
            out = subprocess.run(child_argv(AS_NOBODY, base, sock, control_path),
                                 env=child_env(), capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            lines = out.stdout.splitlines()
            # The control socket shows nobody can connect to a socket it may use at all.
            assert lines[:2] == ["connected", "refused"]
            assert "belongs to root" in lines[2] and "run every process as that user" in lines[2]
            assert "cannot create" in lines[3] and "must be writable" in lines[3]
            assert q.get(timeout=10) == "private"
        control.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_missing_directory_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ackqueue.StorageError, match="does not exist"):
        ackqueue.AckQueue(str(tmp_path / "nowhere" / "q.fs"), shared=True)


def _plain_items(path: str, server: int) -> list[object]:
    """The items of the queue file at ``path``, opened in this process alone once its server
    (pid ``server``) has exited: its socket goes first, the file's lock with the process."""
    wait_gone(server, 30)
    return stored_items(path)


def test_a_new_file_at_the_path_of_a_lingering_server_gets_a_server_of_its_own(
    qpath, monkeypatch
) -> None:
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "120")  # the old server lingers throughout
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("in the old file")
    old = server_pid(qpath)
    os.remove(qpath)  # while its server lingers without clients
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", IDLE)  # the next server stops soon
    with ackqueue.AckQueue(qpath, shared=True) as q:
        q.put("in the new file")
        assert q.qsize() == 1
        new = server_pid(qpath)
    assert new != old
    wait_gone(old)
    assert _plain_items(qpath, new) == ["in the new file"]


def test_packs_under_live_clients_keep_their_server_and_let_new_clients_in(qpath) -> None:
    code = (
        "import sys, ackqueue\n"
        "q = ackqueue.AckQueue(sys.argv[1], shared=True)\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
        "q.put('from the other process')\n"
        "q.close()\n"
    )
    with ackqueue.AckQueue(qpath, shared=True) as q, \
            ackqueue.AckQueue(qpath, shared=True, name="churn") as churn:
        pid = server_pid(qpath)
        other = spawn_child(code, qpath)
        try:
            assert other.stdout.readline().strip() == "open"
            for round_ in range(3):
                churn.put_many([f"r{round_}-{n}" for n in range(50)])
                with churn.connect() as c:  # acked entries: garbage for the pack
                    c.ack_many([c.get(timeout=5) for _ in range(50)])
                q.put(f"kept {round_}")
                q.pack()  # renames the packed copy over the file the server serves
                with ackqueue.AckQueue(qpath, shared=True, name=f"new-{round_}") as late:
                    late.put("a client registered after the pack")  # not refused
            other.stdin.write("go\n")
            other.stdin.flush()
            assert other.wait(60) == 0
            assert server_pid(qpath) == pid and alive(pid)  # never stopped by the packs
            wait_until(lambda: q.qsize() == 4, 10, "the other process's put to arrive")
        finally:
            if other.poll() is None:
                other.kill()
                other.wait()
    assert sorted(map(str, _plain_items(qpath, pid))) == [
        "from the other process", "kept 0", "kept 1", "kept 2"
    ]


def test_a_server_that_stopped_leaves_only_what_a_closed_queue_leaves(
    qpath, tmp_path_factory
) -> None:
    # Its .tmp (FileStorage's commit scratch file) and its private directory once stayed.
    plain = str(tmp_path_factory.mktemp("plain") / "q.fs")
    with ackqueue.AckQueue(plain) as q:
        q.put("kept")
    closed = sorted(name.replace("q.fs", "FILE") for name in os.listdir(os.path.dirname(plain)))
    name = os.path.basename(qpath)
    for round_ in range(2):  # and a directory removed is made again by the next opener
        with ackqueue.AckQueue(qpath, shared=True, session_timeout=5) as q:
            q.put(f"kept {round_}")
            pid = server_pid(qpath)
            assert os.path.isdir(sharedserver.private_dir(qpath))
        wait_gone(pid)
        left = sorted(n.replace(name, "FILE") for n in os.listdir(os.path.dirname(qpath)))
        assert left == closed == ["FILE", "FILE.index", "FILE.lock"], left
    assert stored_items(qpath) == ["kept 0", "kept 1"]


def test_a_private_directory_swapped_by_another_user_is_not_reconnected_to(
    tmp_path, caplog
) -> None:
    """In a directory everyone may write (no sticky bit), another user renames the server's
    private directory away and puts her own, with her own socket, at its name; then the
    server dies. The connected client must not reconnect to her socket: it reconnects
    through the directory it checked at open, and refuses to start a server in hers."""
    parent = tmp_path / "open-to-all"
    parent.mkdir()
    parent.chmod(0o777)
    path = str(parent / "q.fs")
    nobody = 65534
    with ackqueue.AckQueue(path, shared=True) as q:
        q.put("mine")
        directory = sharedserver.private_dir(path)
        pid = server_pid(path)
        os.rename(directory, directory + ".moved")  # what any user may do in this parent
        os.mkdir(directory, 0o700)
        her = socket.socket(socket.AF_UNIX)
        her.bind(os.path.join(directory, sharedserver.SOCKET))
        her.listen()
        her.setblocking(False)
        for made in (os.path.join(directory, sharedserver.SOCKET), directory):
            os.chown(made, nobody, nobody)
        connected_to_her = []

        def her_accepts() -> bool:
            with contextlib.suppress(BlockingIOError):
                connected_to_her.append(her.accept()[0])
            return bool(connected_to_her)

        try:
            os.kill(pid, signal.SIGKILL)
            wait_until(
                lambda: her_accepts() or "belongs to nobody" in caplog.text,
                timeout=20, what="the client to reconnect somewhere or refuse",
            )
            assert not her_accepts()
        finally:
            her.close()
            shutil.rmtree(directory)
            os.rename(directory + ".moved", directory)
        assert q.get(timeout=30) == "mine"  # a server started again in its own directory
