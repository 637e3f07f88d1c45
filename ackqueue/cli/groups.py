"""``ackqueue groups PATH``: items per group, held per group, when each group next delivers;
and the group part of ``ackqueue remove PATH --group G`` (the command is in changing.py).

Read from the file like ``stats`` (read-only, also while a live process has it open: holds are
those its status file reports, or in shared mode the stored ones). What only a live process
knows is not shown: when a ``group_interval`` ends there (shared mode stores it, and it is
shown as "interval").
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from ackqueue.cli.common import Progress, confirm, open_for_change, single_name
from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import age_text, counted, paused_text
from ackqueue.storage.counts import stored_count

SHOWN = 50


@dataclass
class GroupRow:
    group: str | None  # None: the items put without a group
    items: int = 0  # stored: ready, held or delayed
    ready: int = 0
    held: int | None = 0  # None: unknown (no status file from the live process)
    delayed: int = 0
    next_due: float | None = None  # epoch seconds; None: nothing waits
    paused_until: float | None = None
    queue_paused: bool = False  # the whole queue is paused: no group delivers until resumed


def group_rows(qf: QueueFile, name: str, now: float) -> list[GroupRow]:
    """One row per group of queue ``name``, the biggest first (a long read shows progress)."""
    record = qf.record(name)
    held_keys = qf.held_keys(name)
    delayed_index = record.delayed or {}
    rows: dict[str | None, GroupRow] = {}
    for key, entry in qf.stored_entries(record, Progress("reading entries"), stored_count(record)):
        group = entry.group
        row = rows.get(group)
        if row is None:
            row = rows[group] = GroupRow(group, held=None if held_keys is None else 0)
        row.items += 1
        due = float(delayed_index.get(key, 0.0) or 0.0)
        if held_keys is not None and repr(key) in held_keys:
            row.held = (row.held or 0) + 1
        elif due > now:
            row.delayed += 1
            row.next_due = due if row.next_due is None else min(row.next_due, due)
        else:
            row.ready += 1
            row.next_due = now
    turns = record.group_turns or {}
    for group, until in (record.group_pauses or {}).items():
        if until > now and group in rows:
            rows[group].paused_until = until
    queue_paused = qf.paused(name)
    for row in rows.values():
        waits = [row.paused_until or 0.0, float(turns.get(row.group, 0.0))]
        if row.next_due is not None and row.ready:
            row.next_due = max([row.next_due, *[w for w in waits if w > now]])
        row.queue_paused = queue_paused
    return sorted(rows.values(), key=lambda r: (-r.items, r.group or ""))


def cmd_groups(args: argparse.Namespace) -> int:
    now = time.time()
    with QueueFile(args.path) as qf:
        name = single_name(qf, args.name)
        rows = group_rows(qf, name, now)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    if not rows:
        print(f"queue {name!r} is empty")
        return 0
    paused = f"; {paused_text(args.path, name)}" if rows[0].queue_paused else ""
    print(f"queue {name!r}: {counted(len(rows), 'group')}{paused}")
    print(f"  {'group':<30} {'items':>9} {'ready':>9} {'held':>7} {'delayed':>9}  next due")
    for row in rows[:SHOWN]:
        label = "(no group)" if row.group is None else row.group
        held = "?" if row.held is None else f"{row.held:,}"
        print(f"  {label:<30} {row.items:>9,} {row.ready:>9,} {held:>7} {row.delayed:>9,}  "
              f"{_due_text(row, now)}")
    if len(rows) > SHOWN:
        print(f"  ... and {len(rows) - SHOWN:,} more groups (see --json)")
    return 0


def _due_text(row: GroupRow, now: float) -> str:
    paused = "" if row.paused_until is None else f" (paused {age_text(row.paused_until - now)})"
    if row.next_due is None:
        return "-" + paused
    if row.queue_paused:
        return "when the queue is resumed" + paused
    if row.next_due <= now:
        return "now" + paused
    return f"in {age_text(row.next_due - now)}{paused}"


def remove_group(args: argparse.Namespace) -> int:
    """``ackqueue remove PATH --group G``: every waiting item of group G, after ``--yes``;
    without ``--yes`` it says how many that would be (none: nothing to confirm, success)."""
    if not args.yes:
        with QueueFile(args.path) as qf:
            name = single_name(qf, args.name)
            row = next((r for r in group_rows(qf, name, time.time()) if r.group == args.group),
                       None)
        waiting = 0 if row is None else row.ready + row.delayed
        if not waiting:
            print(f"group {args.group!r} of queue {name!r} has no waiting items; "
                  "nothing to remove")
            return 0
        confirm(args, f"remove {counted(waiting, 'waiting item')} of group {args.group!r} of "
                f"queue {name!r}")
        return 1
    with open_for_change(args.path, args.name) as q:
        removed: Any = q.remove_group(args.group)
        print(f"removed {counted(removed, 'item')} of group {args.group!r} from queue "
              f"{q.name!r}")
    return 0


def add_commands(command: Any) -> None:
    """Add ``groups`` with ``command(name, func, help, reading)`` (see commands.build_parser)."""
    command("groups", cmd_groups, "items, ready, held and delayed per group, and when each "
            "group next delivers", reading=True)
