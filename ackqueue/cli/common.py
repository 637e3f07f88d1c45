"""What the command line's commands share: their error, the queue classes by kind, progress
lines, choosing the queue of a file, and opening it for a change."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import age_text
from ackqueue.queue import requests
from ackqueue.queue.queues import AckQueue, LifoAckQueue, PriorityAckQueue
from ackqueue.storage import zeo
from ackqueue.storage.engine import is_uri

QUEUE_CLASSES: dict[str, type[AckQueue[Any]]] = {
    "fifo": AckQueue,
    "lifo": LifoAckQueue,
    "priority": PriorityAckQueue,
}


class CommandError(Exception):
    """A command cannot do what was asked; the message is the one line the user sees."""


class Progress:
    """Reports a long operation's progress, at most once an ``interval`` of ``clock``: a line
    ``what: done/total`` on stderr (or to ``out``), with the rate per second and the time left
    at that rate when asked."""

    def __init__(
        self,
        what: str,
        clock: Callable[[], float] = time.monotonic,
        out: Callable[[str], None] | None = None,
        rate: bool = False,
        interval: float = 1.0,
    ) -> None:
        self.what, self.interval = what, interval
        self._clock, self._out, self._rate = clock, out, rate
        self._started = self._last = clock()

    def __call__(self, done: int, total: int = 0, final: bool = False) -> None:
        now = self._clock()
        if not final and now - self._last < self.interval:
            return
        self._last = now
        line = f"  {self.what}: {done:,}" + (f"/{total:,}" if total else "")
        if self._rate:
            rate = done / max(1e-9, now - self._started)
            line += f" ({rate:,.0f}/s"
            if total and 0 < done < total:  # at this pace: how long the rest takes
                line += f", about {age_text((total - done) / rate)} left"
            line += ")"
        if self._out is None:
            print(line, file=sys.stderr, flush=True)
        else:
            self._out(line)


def single_name(qf: QueueFile, name: str | None) -> str:
    if name is not None:
        qf.record(name)
        return name
    names = qf.names()
    if "default" in names or len(names) != 1:
        return "default" if "default" in names else pick_error(qf, names)
    return names[0]


def pick_error(qf: QueueFile, names: list[str]) -> str:
    known = ", ".join(repr(n) for n in names) or "none"
    raise CommandError(f"{qf.path} holds several queues ({known}); choose one with --name")


def where(qf: QueueFile) -> str:
    if not qf.is_file:
        return "a shared storage; holds and sessions as stored in it"
    if qf.live_pid is None:
        return "not open in any process"
    if qf.served:
        return (f"served by ackqueue's shared server (process {qf.live_pid}) to the processes "
                "of its sessions (below); reading it read-only")
    pid = "an unknown process" if qf.live_pid < 0 else f"process {qf.live_pid}"
    return f"open in {pid}; reading it read-only"


def open_for_change(path: str, name: str | None) -> Any:  # Any: dead-letter methods vary
    """The queue to change: opened here, through the file's server if processes share it, or,
    when one process has the file open, a :class:`LiveQueue` whose changes that process makes."""
    with QueueFile(path) as qf:
        chosen = single_name(qf, name)
        kind = qf.kind(chosen)
        serializer = qf.serializer(chosen)
        owner = requested_of(qf)
    if owner is not None:
        return LiveQueue(path, chosen, owner)
    return open_queue(kind, path, chosen, serializer=serializer)


def requested_of(qf: QueueFile) -> int | None:
    """The pid of the one process that has ``qf``'s file open (without shared=True), which
    takes changes as requests (:mod:`ackqueue.queue.requests`); None if the command may open
    the file itself (nobody has it, or its shared server lets it in)."""
    if not qf.is_file or qf.served or qf.live_pid is None or qf.live_pid < 0:
        return None
    return qf.live_pid


class LiveQueue:
    """A queue of a file that another process has open: what a changing command reads comes
    from the file (read-only), and each change is a request that process carries out."""

    def __init__(self, path: str, name: str, pid: int) -> None:
        self.name, self.pid = name, pid
        self._path = os.path.realpath(path)
        print(f"{path} is open in process {pid}: that process makes the change",
              file=sys.stderr, flush=True)

    def _ask(self, command: str, **arguments: Any) -> Any:
        try:
            return requests.ask(self._path, command, self.name, self.pid, **arguments)
        except requests.RequestError as exc:
            raise CommandError(str(exc)) from None

    def _stats(self) -> Any:
        with QueueFile(self._path) as qf:
            return qf.stats(self.name)

    @property
    def paused(self) -> bool:
        with QueueFile(self._path) as qf:
            return qf.paused(self.name)

    def dead_count(self) -> int:
        return int(self._stats().dead)

    def qsize(self) -> int:
        stats = self._stats()
        return int(stats.ready if stats.ready is not None else stats.stored - stats.delayed)

    def pause(self) -> None:
        self._ask("pause")

    def resume(self) -> None:
        self._ask("resume")

    def requeue_dead(self) -> int:
        return int(self._ask("requeue_dead"))

    def purge_dead(self) -> int:
        return int(self._ask("purge_dead"))

    def purge_ready(self) -> int:
        return int(self._ask("purge_ready"))

    def remove(self, key: str | bytes) -> None:
        as_bytes = isinstance(key, bytes)
        self._ask("remove", key=key.decode() if isinstance(key, bytes) else key, bytes=as_bytes)

    def remove_group(self, group: str) -> int:
        return int(self._ask("remove_group", group=group))

    def pack(self) -> None:
        self._ask("pack")

    def __enter__(self) -> LiveQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


def open_queue(kind: str, path: str, name: str, **options: Any) -> AckQueue[Any]:
    """Queue ``name`` of ``kind`` in ``path`` for a change: through the file's server when
    processes share it (``shared=True``; opening it directly would be refused), else as is."""
    shared = True if not is_uri(path) and zeo.served_by(path) else None
    return QUEUE_CLASSES[kind](path, name=name, shared=shared, **options)


def confirm(args: argparse.Namespace, what: str) -> bool:
    if args.yes:
        return True
    print(f"would {what}; add --yes to do it", file=sys.stderr)
    return False
