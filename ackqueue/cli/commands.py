"""The ``ackqueue`` command line: a tour, and inspecting and repairing queue files.

Reading commands (``stats``, ``peek``, ``dead``) open the file read-only, so they work while a
live process has it open. Changing commands (``requeue``, ``purge``, ``pack``) need the file to
themselves, and ``requeue``/``purge`` do nothing without ``--yes``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ackqueue.cli import bench, inspection
from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import QueueStats, SessionInfo, as_json
from ackqueue.errors import AckQueueError, Empty
from ackqueue.queue.queues import AckQueue, LifoAckQueue, PriorityAckQueue
from ackqueue.storage.counts import stored_count

QUEUE_CLASSES: dict[str, type[AckQueue[Any]]] = {
    "fifo": AckQueue,
    "lifo": LifoAckQueue,
    "priority": PriorityAckQueue,
}
PURGE_BATCH = 500
HELD_SHOWN = 10


class CommandError(Exception):
    """A command cannot do what was asked; the message is the one line the user sees."""


class Progress:
    """Reports a long operation's progress on stderr, at most once a second of ``clock``."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self._clock = clock
        self._last = clock()

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now - self._last >= 1.0:
            self._last = now
            of = f"/{total}" if total else ""
            print(f"  {self.what}: {done}{of}", file=sys.stderr, flush=True)


# -- reading ---------------------------------------------------------------------------------------

def _names(qf: QueueFile, name: str | None) -> list[str]:
    if name is not None:
        qf.record(name)  # a clear error if there is no such queue
        return [name]
    return qf.names()


def _where(qf: QueueFile) -> str:
    if not qf.is_file:
        return "a shared storage; holds and sessions as stored in it"
    if qf.live_pid is None:
        return "not open in any process"
    pid = "an unknown process" if qf.live_pid < 0 else f"process {qf.live_pid}"
    return f"open in {pid}; reading it read-only"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cmd_stats(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        progress = Progress("reading entries")
        queues = [qf.stats(n, progress) for n in _names(qf, args.name)]
        sessions = qf.sessions()
        live_size, live_exact = qf.live_size(Progress("measuring live data"))
        report = {
            "path": qf.path,
            "live_pid": qf.live_pid,
            "holds_known": qf.holds_known,
            "holds_age": qf.holds_age,
            "file_size": qf.file_size(),
            "live_size": live_size,
            "live_size_exact": live_exact,
            "queues": [as_json(s) for s in queues],
            "sessions": as_json(sessions),
        }
        if args.json:
            print(json.dumps(report, indent=2))
            return 0
        print(f"{qf.path}: {_where(qf)}")
        if qf.holds_age is not None:
            print(f"holds as the live process reported them {_age(qf.holds_age)} ago")
        size = qf.file_size()
        if qf.is_file and size is not None:
            about = "" if live_exact else "about "
            print(f"file size {size:,} bytes; live data {about}{live_size:,} bytes")
        elif size is not None:
            print(f"storage size {size:,} bytes (as the server reports it)")
        for stats in queues:
            _print_stats(stats, qf.holds_known)
        _print_sessions(sessions, qf.shared)
    return 0


def _print_sessions(sessions: list[SessionInfo], shared: bool) -> None:
    if not shared:
        return
    print(f"sessions ({len(sessions)}):" if sessions else "sessions: none open")
    for s in sessions:
        renewed = "never renewed" if s.renewed_age is None else f"renewed {_age(s.renewed_age)} ago"
        state = "LAPSED (reaped by the next live process)" if s.lapsed else "live"
        print(f"  {s.id} (host {s.host}, pid {s.pid}): {state}, {renewed}, lease {s.lease:g} s, "
              f"holding {s.held}")


def _print_stats(s: QueueStats, holds_known: bool) -> None:
    unknown = "unknown (the live process writes no status file)"
    print(f"queue {s.name!r} ({s.kind}):")
    print(f"  ready   {s.ready if s.ready is not None else unknown}")
    print(f"  held    {s.held if s.held is not None else unknown}")
    print(f"  delayed {s.delayed}")
    print(f"  dead    {s.dead}")
    print(f"  stored  {s.stored} (ready + held + delayed)")
    scan = inspection.OLDEST_SCAN
    among = "" if s.oldest_ready_exact else f" (among the first {scan:,} in order)"
    print(f"  oldest ready item: {_age(s.oldest_ready_age)}{among}")
    for h in s.held_items[:HELD_SHOWN]:
        since = "" if h.age is None else f" for {_age(h.age)}"
        print(f"  held by {h.owner!r}{since}, attempt {h.attempts}, delivery {h.delivery_id}")
    if len(s.held_items) > HELD_SHOWN:
        print(f"  ... and {len(s.held_items) - HELD_SHOWN} more held (see --json)")


def cmd_peek(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        name = _single_name(qf, args.name)
        items = qf.peek(name, args.n, limit=None if args.json else 200)
    if args.json:
        print(json.dumps(as_json(items), indent=2))
        return 0
    if not items:
        print(f"queue {name!r} is empty")
    for n, it in enumerate(items, 1):
        print(f"{n:>4}. {it.item}  [{it.state}, put {_age(it.put_age)} ago]")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        name = _single_name(qf, args.name)
        letters = qf.dead(name, limit=None if args.json else 200)
    if args.json:
        print(json.dumps(as_json(letters), indent=2))
        return 0
    if not letters:
        print(f"queue {name!r} has no dead letters")
    now = time.time()
    for d in letters:
        when = "" if d.when is None else f", {_age(now - d.when)} ago"
        print(f"{d.id}: {d.item}  [{d.attempts} attempts{when}: {d.reason or 'no reason'}]")
    return 0


def _single_name(qf: QueueFile, name: str | None) -> str:
    if name is not None:
        qf.record(name)
        return name
    names = qf.names()
    if "default" in names or len(names) != 1:
        return "default" if "default" in names else _pick_error(qf, names)
    return names[0]


def _pick_error(qf: QueueFile, names: list[str]) -> str:
    known = ", ".join(repr(n) for n in names) or "none"
    raise CommandError(f"{qf.path} holds several queues ({known}); choose one with --name")


# -- changing ----------------------------------------------------------------------------------

def _open_for_change(path: str, name: str | None) -> Any:  # Any: dead-letter methods vary
    with QueueFile(path) as qf:
        chosen = _single_name(qf, name)
        kind = qf.kind(chosen)
    return QUEUE_CLASSES[kind](path, name=chosen)


def _confirm(args: argparse.Namespace, what: str) -> bool:
    if args.yes:
        return True
    print(f"would {what}; add --yes to do it", file=sys.stderr)
    return False


def cmd_requeue(args: argparse.Namespace) -> int:
    if args.held:
        return _requeue_held(args)
    with _open_for_change(args.path, args.name) as q:
        count = q.dead_count()
        if not _confirm(args, f"move {count} dead letter(s) of {q.name!r} back to the queue"):
            return 1
        q.requeue_dead()
        print(f"requeued {count} dead letter(s) of queue {q.name!r}")
    return 0


def _requeue_held(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        name = _single_name(qf, args.name)
        if qf.shared:
            raise CommandError(
                f"{qf.path} is shared: its holds are stored under the session that took them "
                "and go back when that session closes or, if its process died, when its lease "
                "lapses and a live process reaps it (see `ackqueue stats`)"
            )
        if qf.live_pid is not None:
            raise CommandError(
                f"{qf.path} is {_where(qf)}: its held items live in that process's memory and go "
                "back when their consumers close or the process ends; stop it to requeue them"
            )
        stored = stored_count(qf.record(name))
    print(f"queue {name!r}: nothing is held. Holds live only in the memory of the process that "
          f"took them, so with no process open all {stored} stored item(s) are ready already.")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with _open_for_change(args.path, args.name) as q:
        if args.dead:
            count = q.dead_count()
            if not _confirm(args, f"delete {count} dead letter(s) of {q.name!r} for good"):
                return 1
            q.purge_dead()
            print(f"purged {count} dead letter(s) of queue {q.name!r}")
            return 0
        count = q.qsize()
        if not _confirm(args, f"delete {count} ready item(s) of {q.name!r} for good"):
            return 1
        removed = _purge_ready(q, Progress("purged"))
        print(f"purged {removed} ready item(s) of queue {q.name!r}")
    return 0


def _purge_ready(q: AckQueue[Any], progress: Callable[[int, int], None]) -> int:
    total, removed = q.qsize(), 0
    grouped: Any = getattr(q, "transaction", None)  # one commit per batch where available
    while True:
        taken = 0
        with grouped() if grouped is not None else contextlib.nullcontext():
            for _ in range(PURGE_BATCH if grouped is not None else 1):
                try:
                    q.get_nowait()
                except Empty:
                    break  # leave the batch normally, so that what it took is committed
                taken += 1
        removed += taken
        if not taken:
            return removed
        progress(removed, total)


def cmd_pack(args: argparse.Namespace) -> int:
    with _open_for_change(args.path, args.name) as q:
        size = q._store.db.storage.getSize
        before = size()
        print(f"packing {args.path} ({before:,} bytes)...", file=sys.stderr, flush=True)
        started = time.monotonic()
        q.pack()
        after = size()
    print(f"packed {args.path}: {before:,} -> {after:,} bytes in "
          f"{time.monotonic() - started:.1f} s")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ackqueue.cli.demo import run_demo

    return run_demo()


# -- the parser ----------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ackqueue", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,
                reading: bool = False) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(func=func)
        if name != "demo":
            sub.add_argument("path", metavar="PATH",
                             help="the queue's FileStorage file, or a storage URI (zeo://host:port)")
            sub.add_argument("--name", help="the named queue in the file (default: 'default')")
        if reading:
            sub.add_argument("--json", action="store_true", help="machine-readable output")
        return sub

    command("demo", cmd_demo, "a short tour: crashes and restarts lose nothing")
    command("stats", cmd_stats, "counts by state, oldest item, held items, sizes", reading=True)
    peek = command("peek", cmd_peek, "show the next items in delivery order", reading=True)
    peek.add_argument("-n", type=int, default=10, help="how many (default 10)")
    command("dead", cmd_dead, "list the dead letters", reading=True)
    requeue = command("requeue", cmd_requeue, "put dead letters back in the queue")
    which = requeue.add_mutually_exclusive_group(required=True)
    which.add_argument("--dead", action="store_true", help="every dead letter")
    which.add_argument("--held", action="store_true", help="held items (see the message)")
    requeue.add_argument("--yes", action="store_true", help="really do it")
    purge = command("purge", cmd_purge, "delete ready items or dead letters for good")
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument("--ready", action="store_true", help="every ready item")
    which.add_argument("--dead", action="store_true", help="every dead letter")
    purge.add_argument("--yes", action="store_true", help="really do it")
    command("pack", cmd_pack, "drop old revisions from the file, keeping the live state")
    bench.add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # ZODB warns when it rebuilds an index it cannot use read-only; the user need not care.
    zodb_log = logging.getLogger("ZODB")
    level = zodb_log.level
    zodb_log.setLevel(logging.ERROR)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # output piped into `head`: stop quietly
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout for the interpreter's exit
        return 0
    except (CommandError, AckQueueError, OSError) as exc:
        print(f"ackqueue {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ackqueue {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        zodb_log.setLevel(level)
