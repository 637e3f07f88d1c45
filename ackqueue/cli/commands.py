"""The ``ackqueue`` command line: a tour, and inspecting and repairing queue files.

Reading commands (``stats``, ``peek``, ``dead``, ``top``) open the file read-only, so they work
while a live process has it open. Changing commands (``requeue``, ``purge``, ``pack``, ``drop``,
``pause``, ``resume``, ``remove``: :mod:`.changing`) work on a file in use too (see there
how), and ``requeue``/``purge``/``drop`` do nothing without ``--yes``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
import time
from collections.abc import Callable

from ackqueue.cli import bench, groups, inspection, salvage
from ackqueue.cli.changing import (
    cmd_drop,
    cmd_pack,
    cmd_pause,
    cmd_purge,
    cmd_remove,
    cmd_requeue,
    cmd_resume,
)
from ackqueue.cli.common import CommandError, Progress, single_name, where
from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import (
    QueueStats,
    SessionInfo,
    age_text,
    as_json,
    counted,
    paused_text,
    session_state,
)
from ackqueue.errors import AckQueueError
from ackqueue.storage.counts import stored_count

HELD_SHOWN = 10
TEXT_LIMIT = 200  # characters of an item's repr that peek and dead print
# Characters of JSON one item may take in peek/dead --json before its repr, cut to this, stands
# in for it (item_truncated): one huge item must not flood a terminal or a pipe. --whole: all.
JSON_LIMIT = 10_000
# Where a command's PATH or --name means something else than "the queue to act on".
PATH_HELP = {
    "pack": "the FileStorage file (a server's storage is packed with its own tool: zeopack)",
    "drop": "the FileStorage file (not a storage URI: no live process may lose the queue)",
}
NAME_HELP = {
    "pack": "not needed: a pack is file-wide and keeps the live state of every queue in the "
            "file (given, it must name one of them)",
    "drop": "the queue to delete (required: there is no default, so that nothing is deleted "
            "by a forgotten option)",
}
DESCRIPTION = "The ackqueue command line: a tour, and inspecting and repairing queue files."


# -- reading ---------------------------------------------------------------------------------------

def _names(qf: QueueFile, name: str | None) -> list[str]:
    if name is not None:
        qf.record(name)  # a clear error if there is no such queue
        return [name]
    return qf.names()


def cmd_stats(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        progress = Progress("reading entries")
        queues = [qf.stats(n, progress) for n in _names(qf, args.name)]
        sessions = qf.sessions()
        live_size, live_exact = qf.live_size(Progress("measuring live data"))
        report = {
            "path": qf.path,
            "live_pid": qf.live_pid,
            "live_pid_is_shared_server": qf.served,
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
        print(f"{qf.path}: {where(qf)}")
        if qf.holds_age is not None:
            print(f"holds as the live process reported them {age_text(qf.holds_age)} ago")
        size = qf.file_size()
        if qf.is_file and size is not None:
            about = "" if live_exact else "about "
            print(f"file size {size:,} bytes; live data {about}{live_size:,} bytes")
        elif size is not None:
            print(f"storage size {size:,} bytes (as the server reports it)")
        for stats in queues:
            _print_stats(stats, qf.holds_known, args.path)
        _print_sessions(sessions, qf.shared)
    return 0


def _print_sessions(sessions: list[SessionInfo], shared: bool) -> None:
    if not shared:
        return
    print(f"sessions ({len(sessions)}):" if sessions else "sessions: none open")
    for s in sessions:
        renewed = ("never renewed" if s.renewed_age is None
                   else f"renewed {age_text(s.renewed_age)} ago")
        state = session_state(s)
        print(f"  {s.id} (host {s.host}, pid {s.pid}): {state}, {renewed}, lease {s.lease:g} s, "
              f"holding {s.held:,}")


def _print_stats(s: QueueStats, holds_known: bool, path: str) -> None:
    unknown = "unknown (the live process writes no status file)"
    kind = s.kind if s.serializer == "pickle" else f"{s.kind}, serializer {s.serializer!r}"
    print(f"queue {s.name!r} ({kind}): {paused_text(path, s.name)}" if s.paused
          else f"queue {s.name!r} ({kind}):")
    print(f"  ready   {f'{s.ready:,}' if s.ready is not None else unknown}")
    print(f"  held    {f'{s.held:,}' if s.held is not None else unknown}")
    print(f"  delayed {s.delayed:,}")
    print(f"  dead    {s.dead:,}")
    print(f"  stored  {s.stored:,} (ready + held + delayed)")
    if s.seen is not None:
        print(f"  seen    {s.seen:,} (keys remembered as done: put(unique=))")
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
        name = single_name(qf, args.name)
        items = qf.peek(name, args.n, limit=_item_limit(args), for_json=args.json,
                        progress=Progress("reading items") if args.n > 10_000 else None)
        stored = stored_count(qf.record(name))
        paused = qf.paused(name)
    if args.json:
        print(json.dumps(as_json(items), indent=2))
        return 0
    if paused:
        print(f"queue {name!r} is {paused_text(args.path, name)}")
    if not stored:
        print(f"queue {name!r} is empty")
    elif not items:
        print(f"queue {name!r}: {counted(stored, 'stored item')}, none shown (-n 0)")
    for n, it in enumerate(items, 1):
        about = [it.state if it.due_in is None else f"delayed, due in {age_text(it.due_in)}"]
        if it.key is not None:
            about.append(f"key {it.key!r}")
        if it.group is not None:
            about.append(f"group {it.group!r}")
        about.append(f"put {age_text(it.put_age)} ago")
        print(f"{n:>4,}. {it.item}  [{', '.join(about)}]")
    if any(it.item_truncated for it in items):
        print("(long items are cut short; --whole shows them whole)")
    return 0


def _item_limit(args: argparse.Namespace) -> int | None:
    if args.whole:
        return None
    return JSON_LIMIT if args.json else TEXT_LIMIT


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
        name = single_name(qf, args.name)
        letters = qf.dead(name, limit=_item_limit(args), for_json=args.json)
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
            sub.add_argument("path", metavar="PATH", help=PATH_HELP.get(
                name, "the queue's FileStorage file, or a storage URI (zeo://host:port)"))
            sub.add_argument("--name", required=name == "drop", help=NAME_HELP.get(
                name, "the named queue in the file (default: 'default', or the file's only "
                "queue)"))
        if reading:
            sub.add_argument("--json", action="store_true", help="machine-readable output")
        return sub

    command("demo", cmd_demo, "a short tour: crashes and restarts lose nothing")
    command("stats", cmd_stats, "counts by state, oldest item, held items, sizes", reading=True)
    peek = command("peek", cmd_peek, "show the next items in delivery order", reading=True)
    peek.add_argument("-n", type=_count_arg, default=10, help="how many (default 10)")
    dead = command("dead", cmd_dead, "list the dead letters", reading=True)
    for lister in (peek, dead):
        lister.add_argument("--whole", action="store_true", help=(
            f"show every item whole (default: an item's repr is cut to {TEXT_LIMIT} characters, "
            f"and with --json an item longer than {JSON_LIMIT:,} characters is given as its "
            "repr cut to that, with item_truncated true)"))
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
    command("pause", cmd_pause, "hand out nothing until resumed, in every process; puts go on")
    command("resume", cmd_resume, "hand items out again after a pause")
    groups.add_commands(command)
    remove = command("remove", cmd_remove, "drop waiting items by the key they were put with, "
                     "or by group (a held item is left to its consumer)")
    which = remove.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", action="append", help="the item's key (repeat for several)")
    which.add_argument("--group", help="every waiting item put with this group= (needs --yes)")
    remove.add_argument("--bytes", action="store_true",
                        help="the keys were bytes, not str (given here as UTF-8)")
    remove.add_argument("--yes", action="store_true", help="really remove a whole group")
    salvage.add_command(commands)
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
