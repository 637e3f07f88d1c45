"""``ackqueue top``: a live view of a queue file or shared storage, refreshed every second.

Each refresh reads what ``ackqueue stats`` reads (the storage opened read-only, anew, plus the
live process's status file or, on a shared storage, the stored holds and sessions), so it works
beside a process that has the file open and never changes anything. Rates are the change of
the counts between two refreshes per second: a file records no history of puts and acks, so
what it shows is net (puts minus settled items for ``stored``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import QueueStats, age_text, counted, paused_text

RATED = ("stored", "ready", "held", "delayed", "dead")
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: redraw in place on a terminal


def snapshot(path: str, name: str | None) -> dict[str, Any]:
    """One reading of the queues at ``path`` (all of them, or ``name``) as JSON-ready data."""
    with QueueFile(path) as qf:
        names = [name] if name is not None else qf.names()
        queues = [_queue(qf.stats(n)) for n in names]
        sessions = [{"id": s.id, "host": s.host, "pid": s.pid, "lapsed": s.lapsed,
                     "process_gone": s.process_gone, "held": s.held} for s in qf.sessions()]
        return {"at": time.time(), "path": qf.path, "live_pid": qf.live_pid,
                "live_pid_is_shared_server": qf.served,
                "holds_known": qf.holds_known, "queues": queues, "sessions": sessions}


def _queue(s: QueueStats) -> dict[str, Any]:
    owners: dict[str, dict[str, Any]] = {}
    for h in s.held_items:
        mine = owners.setdefault(h.owner, {"held": 0, "oldest_age": None})
        mine["held"] += 1
        if h.age is not None and (mine["oldest_age"] is None or h.age > mine["oldest_age"]):
            mine["oldest_age"] = h.age
    return {"name": s.name, "kind": s.kind, "stored": s.stored, "ready": s.ready,
            "held": s.held, "delayed": s.delayed, "dead": s.dead,
            "oldest_ready_age": s.oldest_ready_age, "held_by": owners, "rates": None,
            "paused": s.paused}


def add_rates(previous: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """Give each queue of ``current`` the per-second change of its counts since ``previous``."""
    if previous is None:
        return
    elapsed = current["at"] - previous["at"]
    before = {q["name"]: q for q in previous["queues"]}
    for queue in current["queues"]:
        old = before.get(queue["name"])
        if old is None or elapsed <= 0:
            continue
        queue["rates"] = {
            count: None if queue[count] is None or old[count] is None
            else (queue[count] - old[count]) / elapsed
            for count in RATED
        }


def render(view: dict[str, Any]) -> list[str]:
    """The text lines of one refresh."""
    pid = view["live_pid"]
    where = ("not open in any process" if pid is None
             else f"served by ackqueue's shared server (process {pid})"
             if view.get("live_pid_is_shared_server") else f"open in process {pid}")
    lines = [f"{view['path']}: {where}; {time.strftime('%H:%M:%S', time.localtime(view['at']))}"]
    for q in view["queues"]:
        rates = q["rates"] or {}
        paused = f": {paused_text(view['path'], q['name'])}" if q.get("paused") else ""
        lines.append(f"queue {q['name']!r} ({q['kind']}){paused}")
        for count in RATED:
            value = q[count]
            shown = "unknown" if value is None else f"{value:,}"
            rate = rates.get(count)
            per_s = "" if rate is None else f"  {rate:+,.1f}/s"
            lines.append(f"  {count:<8}{shown:>12}{per_s}")
        oldest = q["oldest_ready_age"]
        lines.append(f"  oldest ready {'-' if oldest is None else age_text(oldest)}")
        for owner, mine in sorted(q["held_by"].items()):
            age = mine["oldest_age"]
            since = "" if age is None else f", oldest for {age_text(age)}"
            lines.append(f"  held by {owner!r}: {counted(mine['held'], 'item')}{since}")
    for s in view["sessions"]:
        state = ("LAPSED" if s["lapsed"] else f"GONE (process {s['pid']} is no longer running)"
                 if s.get("process_gone") else "live")
        lines.append(f"session {s['id']} (host {s['host']}, pid {s['pid']}): {state}, "
                     f"holding {s['held']:,}")
    return lines


def run_top(path: str, name: str | None, as_json: bool, refreshes: int | None,
            interval: float, out: TextIO | None = None,
            sleep: Callable[[float], None] = time.sleep) -> int:
    """Refresh ``refreshes`` times (None: until interrupted), ``interval`` seconds apart, on
    ``out`` (the ``sys.stdout`` of the call, not of the import, so a redirect is followed)."""
    out = out or sys.stdout
    previous = None
    done = 0
    redraw = not as_json and out.isatty()
    while refreshes is None or done < refreshes:
        if done:
            sleep(interval)
        view = snapshot(path, name)
        add_rates(previous, view)
        previous, done = view, done + 1
        if as_json:
            print(json.dumps(view), file=out, flush=True)
            continue
        frame = "\n".join(render(view))
        print((CLEAR if redraw else ("\n" if done > 1 else "")) + frame, file=out, flush=True)
    return 0
