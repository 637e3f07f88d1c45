"""A real ZEO server for tests: ``runzeo`` on 127.0.0.1 in a child process, restartable.

Restarting keeps the port and the FileStorage, so clients see a server that went away and came
back, which is what ZEO's reconnection is for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TRANSACTION_TIMEOUT = 10.0  # seconds: runzeo's --timeout (transaction_timeout)

# runzeo with ackqueue's mended transaction timeout, as docs/howto/scaling.rst tells users to
# run it (ZEO 6.2's own leaves the commit lock held for ever: see CommitTimeout).
RUNZEO = "from ackqueue.storage.zeoserver import runzeo; runzeo()"


class ZEOServer:
    """``runzeo -a 127.0.0.1:PORT -f FILE -t SECONDS`` as a subprocess."""

    def __init__(self, directory: str, transaction_timeout: float = TRANSACTION_TIMEOUT) -> None:
        self.transaction_timeout = transaction_timeout
        self.path = os.path.join(directory, "zeo.fs")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = open(os.path.join(directory, "zeo.log"), "ab")  # noqa: SIM115

    @property
    def addr(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def uri(self) -> str:
        return f"zeo://127.0.0.1:{self.port}"

    def start(self) -> None:
        # -t: a client stopped between its vote and its finish (a SIGSTOPped process) holds the
        # commit lock; the docs tell runzeo users to set it, as ackqueue's own server does.
        argv = [sys.executable, "-c", RUNZEO, "-a", f"127.0.0.1:{self.port}", "-f", self.path,
                "-t", str(self.transaction_timeout)]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"runzeo exited with {code}; see {self.log.name}")
            try:
                socket.create_connection(self.addr, timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the ZEO server did not start listening") from None
                time.sleep(0.02)  # polling for the port, not synchronising the test

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                # runzeo's SIGTERM handler raises SystemExit wherever the server is; inside
                # conflict resolution that is caught and logged, and the server runs on.
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self.log.close()


@pytest.fixture
def zeo_server(tmp_path) -> Iterator[ZEOServer]:
    """A running ZEO server on 127.0.0.1 with a fresh FileStorage, stopped afterwards."""
    server = ZEOServer(str(tmp_path))
    server.start()
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def two_clients(server: ZEOServer) -> Iterator[tuple[Any, Any, Any, Any]]:
    """The default queue on ``server`` twice, the second through a client of its own (as if
    another process), with a consumer each: ``(q, other, c, o)``."""
    import ZEO

    import ackqueue

    db = ZEO.DB(server.addr)
    try:
        with (
            ackqueue.AckQueue(server.uri) as q,
            ackqueue.AckQueue(db=db) as other,
            q.connect() as c,
            other.connect() as o,
        ):
            yield q, other, c, o
    finally:
        db.close()
