"""Every fsync of one file made in this process, seen at the system-call boundary (the
power-loss tests: tests/storage/test_power_loss*.py).

``os.fsync`` and the module-level ``fsync`` ZODB's FileStorage calls are wrapped; each fsync
of the watched file records how long the file was when it ran: what the fsync is sure to
cover. A call kept the power-loss promise if, before it returned, an fsync ran on a file that
already held everything the call wrote.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

FS_MODULE = sys.modules["ZODB.FileStorage.FileStorage"]

Gate = Callable[[int], None]  # called with the file's size before each fsync of it runs


@dataclass
class FsyncLog:
    """Every fsync of one file made in this process: the file's size when each ran."""

    path: str
    sizes: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: Gate | None = None  # runs before each fsync of the file (a test may hold it there)

    def record(self, fd: int) -> None:
        st = os.fstat(fd)
        try:
            ours = os.stat(self.path)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino):
            with self.lock:
                self.sizes.append(st.st_size)
            if self.gate is not None:
                self.gate(st.st_size)

    def mark(self) -> int:
        with self.lock:
            return len(self.sizes)

    def covered_since(self, mark: int, size: int) -> bool:
        """Whether an fsync after ``mark`` ran once the file held ``size`` bytes or more."""
        with self.lock:
            return any(s >= size for s in self.sizes[mark:])


def watch_fsyncs(path: str, monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    """Record every fsync of ``path`` until the test ends (``monkeypatch`` undoes it)."""
    log = FsyncLog(path)

    def wrap(real: Callable[[int], None]) -> Callable[[int], None]:
        def fsync(fd: int) -> None:
            log.record(fd)  # the size before the sync: what the sync is sure to cover
            real(fd)

        return fsync

    monkeypatch.setattr(os, "fsync", wrap(os.fsync))
    if getattr(FS_MODULE, "fsync", None) is not None:
        monkeypatch.setattr(FS_MODULE, "fsync", wrap(FS_MODULE.fsync))
    return log
