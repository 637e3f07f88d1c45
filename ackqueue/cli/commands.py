"""The ``ackqueue`` command line: a tour, and inspecting and repairing queue files.

Reading commands (``stats``, ``peek``, ``dead``, ``top``) open the file read-only, so they work
while a live process has it open. Changing commands (``requeue``, ``purge``, ``pack``, ``drop``)
need the file to themselves, and ``requeue``/``purge``/``drop`` do nothing without ``--yes``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import ZODB

from ackqueue.cli import bench, inspection
from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import QueueStats, SessionInfo, age_text, as_json, counted
from ackqueue.errors import AckQueueError, Empty
from ackqueue.queue.queues import AckQueue, LifoAckQueue, PriorityAckQueue
from ackqueue.records import queues_of
from ackqueue.storage.counts import stored_count
from ackqueue.storage.files import open_file_storage
from ackqueue.storage.uri import is_uri

QUEUE_CLASSES: dict[str, type[AckQueue[Any]]] = {
    "fifo": AckQueue,
    "lifo": LifoAckQueue,
    "priority": PriorityAckQueue,
}
PURGE_BATCH = 500
HELD_SHOWN = 10
DESCRIPTION = "The ackqueue command line: a tour, and inspecting and repairing queue files."


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
            of = f"/{total:,}" if total else ""
            print(f"  {self.what}: {done:,}{of}", file=sys.stderr, flush=True)


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
            print(f"holds as the live process reported them {age_text(qf.holds_age)} ago")
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
        renewed = ("never renewed" if s.renewed_age is None
                   else f"renewed {age_text(s.renewed_age)} ago")
        state = "LAPSED (reaped by the next live process)" if s.lapsed else "live"
        print(f"  {s.id} (host {s.host}, pid {s.pid}): {state}, {renewed}, lease {s.lease:g} s, "
              f"holding {s.held:,}")


def _print_stats(s: QueueStats, holds_known: bool) -> None:
    unknown = "unknown (the live process writes no status file)"
    print(f"queue {s.name!r} ({s.kind}):")
    print(f"  ready   {f'{s.ready:,}' if s.ready is not None else unknown}")
    print(f"  held    {f'{s.held:,}' if s.held is not None else unknown}")
    print(f"  delayed {s.delayed:,}")
    print(f"  dead    {s.dead:,}")
    print(f"  stored  {s.stored:,} (ready + held + delayed)")
    scan = inspection.OLDEST_SCAN
    among = "" if s.oldest_ready_exact else f" (among the first {scan:,} in order)"
    print(f"  oldest ready item: {age_text(s.oldest_ready_age)}{among}")
    for h in s.held_items[:HELD_SHOWN]:
        since = "" if h.age is None else f" for {age_text(h.age)}"
        print(f"  held by {h.owner!r}{since}, attempt {h.attempts:,}, delivery {h.delivery_id}")
    if len(s.held_items) > HELD_SHOWN:
        print(f"  ... and {len(s.held_items) - HELD_SHOWN:,} more held (see --json)")


def cmd_peek(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        name = _single_name(qf, args.name)
        items = qf.peek(name, args.n, limit=None if args.json else 200, for_json=args.json,
                        progress=Progress("reading items") if args.n > 10_000 else None)
        stored = stored_count(qf.record(name))
    if args.json:
        print(json.dumps(as_json(items), indent=2))
        return 0
    if not stored:
        print(f"queue {name!r} is empty")
    elif not items:
        print(f"queue {name!r}: {counted(stored, 'stored item')}, none shown (-n 0)")
    for n, it in enumerate(items, 1):
        print(f"{n:>4,}. {it.item}  [{it.state}, put {age_text(it.put_age)} ago]")
    return 0


def _count_arg(text: str) -> int:
    """argparse type for ``-n``: a count of 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def cmd_dead(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        name = _single_name(qf, args.name)
        letters = qf.dead(name, limit=None if args.json else 200, for_json=args.json)
    if args.json:
        print(json.dumps(as_json(letters), indent=2))
        return 0
    if not letters:
        print(f"queue {name!r} has no dead letters")
    now = time.time()
    for d in letters:
        when = "" if d.when is None else f", {age_text(now - d.when)} ago"
        print(f"{d.id}: {d.item}  [{counted(d.attempts, 'attempt')}{when}: "
              f"{d.reason or 'no reason'}]")
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
        if not count:
            print(f"queue {q.name!r} has no dead letters; nothing to requeue")
            return 0
        letters = counted(count, "dead letter")
        if not _confirm(args, f"move {letters} of {q.name!r} back to the queue"):
            return 1
        q.requeue_dead()
        print(f"requeued {letters} of queue {q.name!r}")
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
        stats = qf.stats(name)
    waiting = f", and {stats.delayed:,} delayed until due" if stats.delayed else ""
    print(f"queue {name!r}: nothing is held. Holds live only in the memory of the process that "
          f"took them, so with no process open {counted(stats.ready or 0, 'stored item')} "
          f"{'is' if stats.ready == 1 else 'are'} ready already{waiting}.")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with _open_for_change(args.path, args.name) as q:
        what = "dead letter" if args.dead else "ready item"
        count = q.dead_count() if args.dead else q.qsize()
        if not count:
            print(f"queue {q.name!r} has no {what}s; nothing to purge")
            return 0
        if not _confirm(args, f"delete {counted(count, what)} of {q.name!r} for good"):
            return 1
        if args.dead:
            q.purge_dead()
            removed = count
        else:
            removed = _purge_ready(q, Progress("purged"))
        print(f"purged {counted(removed, what)} of queue {q.name!r}")
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
    """Pack the whole file (every queue in it: a pack is file-wide); sizes as ``ls`` shows them."""
    if is_uri(args.path):
        raise CommandError("pack works on a FileStorage file; pack a ZEO server's storage "
                           "with ZEO's zeopack")
    with QueueFile(args.path) as qf:
        name = args.name if args.name is not None else qf.names()[0]
        qf.record(name)
        kind = qf.kind(name)
    before = os.path.getsize(args.path)
    print(f"packing {args.path} ({before:,} bytes)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    with QUEUE_CLASSES[kind](args.path, name=name, autopack=False) as q:
        _with_file_progress(q.pack, args.path + ".pack", before, Progress("packed bytes"))
    after = os.path.getsize(args.path)  # closed: what is left is what ls shows
    print(f"packed {args.path}: {before:,} -> {after:,} bytes in "
          f"{time.monotonic() - started:.1f} s")
    return 0


def _with_file_progress(work: Callable[[], None], growing: str, total: int,
                        progress: Callable[[int, int], None]) -> None:
    """Run ``work`` while reporting the size of the file it writes, ``growing``, as progress."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.25):
            with contextlib.suppress(OSError):
                progress(os.path.getsize(growing), total)

    watcher = threading.Thread(target=watch, name="ackqueue-progress", daemon=True)
    watcher.start()
    try:
        work()
    finally:
        done.set()
        watcher.join()


def cmd_drop(args: argparse.Namespace) -> int:
    """Delete one named queue of a file, with its items and dead letters; the rest stays."""
    if is_uri(args.path):
        raise CommandError("drop works on a FileStorage file only, so that no live process "
                           "on a shared storage loses the queue under its feet")
    with QueueFile(args.path) as qf:
        record = qf.record(args.name)
        stored, dead = stored_count(record), qf.stats(args.name).dead
        others = [n for n in qf.names() if n != args.name]
    contents = f"{counted(stored, 'stored item')} and {counted(dead, 'dead letter')}"
    if not _confirm(args, f"delete queue {args.name!r} of {args.path} with its {contents}"):
        return 1
    db = ZODB.DB(open_file_storage(os.path.realpath(args.path)))  # takes the lock: no live user
    try:
        with db.transaction() as conn:
            del queues_of(conn.root(), create=False)[args.name]
    finally:
        db.close()
    left = ", ".join(repr(n) for n in others) or "none"
    print(f"dropped queue {args.name!r} ({contents}); queues left: {left}. "
          "Its space is freed by the next pack.")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from ackqueue.cli.top import run_top

    refreshes = 1 if args.once else args.refreshes
    return run_top(args.path, args.name, args.json, refreshes, args.interval)


def cmd_demo(args: argparse.Namespace) -> int:
    from ackqueue.cli.demo import run_demo

    return run_demo()


# -- the parser ----------------------------------------------------------------------------------

def _version() -> str:
    try:
        return importlib.metadata.version("ackqueue")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ackqueue", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ackqueue {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,
                reading: bool = False) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(func=func)
        if name != "demo":
            sub.add_argument("path", metavar="PATH",
                             help="the queue's FileStorage file, or a storage URI (zeo://host:port)")
            sub.add_argument("--name", required=name == "drop",
                             help="the named queue in the file (default: 'default')")
        if reading:
            sub.add_argument("--json", action="store_true", help="machine-readable output")
        return sub

    command("demo", cmd_demo, "a short tour: crashes and restarts lose nothing")
    command("stats", cmd_stats, "counts by state, oldest item, held items, sizes", reading=True)
    peek = command("peek", cmd_peek, "show the next items in delivery order", reading=True)
    peek.add_argument("-n", type=_count_arg, default=10, help="how many (default 10)")
    command("dead", cmd_dead, "list the dead letters", reading=True)
    top = command("top", cmd_top, "a live view: counts, holds by owner, rates; one JSON line "
                  "per refresh with --json", reading=True)
    top.add_argument("--interval", type=float, default=1.0,
                     help="seconds between refreshes (default 1)")
    top.add_argument("-n", dest="refreshes", type=_count_arg, default=None,
                     help="stop after N refreshes (default: until Ctrl-C)")
    top.add_argument("--once", action="store_true", help="one refresh, then exit")
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
    command("pack", cmd_pack, "drop old revisions from the file, keeping the live state "
                   "of every queue in it")
    drop = command("drop", cmd_drop, "delete one named queue of the file, with its items")
    drop.add_argument("--yes", action="store_true", help="really do it")
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
