"""The commands that change a queue file: ``requeue``, ``purge``, ``pack``, ``drop``, ``pause``,
``resume`` and ``remove``. ``requeue``, ``purge`` and ``drop`` do nothing without ``--yes``.

Where they work: on a file nobody has open, they open it; on a file processes share
(``shared=True``), they go through its server; on a file one process has open, every command
but ``drop`` is a request that process carries out (:mod:`ackqueue.queue.requests`) on the
queues it has open. ``drop`` needs the file to itself (a live process may be using the queue)
and says what to stop and what to type again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable

from ackqueue.cli.common import (
    CommandError,
    LiveQueue,
    Progress,
    confirm,
    open_for_change,
    open_queue,
    requested_of,
    single_name,
    where,
)
from ackqueue.cli.groups import remove_group
from ackqueue.cli.inspection import QueueFile
from ackqueue.cli.reports import counted
from ackqueue.queue.requests import purge_ready
from ackqueue.records import queues_of
from ackqueue.storage.counts import stored_count
from ackqueue.storage.engine import is_uri, new_db
from ackqueue.storage.filestorage import open_file_storage


def cmd_requeue(args: argparse.Namespace) -> int:
    if args.held:
        return _requeue_held(args)
    with open_for_change(args.path, args.name) as q:
        count = q.dead_count()
        if not count:
            print(f"queue {q.name!r} has no dead letters; nothing to requeue")
            return 0
        letters = counted(count, "dead letter")
        if not confirm(args, f"move {letters} of {q.name!r} back to the queue"):
            return 1
        q.requeue_dead()
        print(f"requeued {letters} of queue {q.name!r}")
    return 0


def _requeue_held(args: argparse.Namespace) -> int:
    with QueueFile(args.path) as qf:
        name = single_name(qf, args.name)
        if qf.shared:
            raise CommandError(
                f"{qf.path} is shared: its holds are stored under the session that took them "
                "and go back when that session closes or, if its process died, when its lease "
                "lapses and a live process reaps it (see `ackqueue stats`)"
            )
        if qf.live_pid is not None:
            raise CommandError(
                f"{qf.path} is {where(qf)}: its held items live in that process's memory and go "
                "back when their consumers close or the process ends; stop it to requeue them"
            )
        stats = qf.stats(name)
    waiting = f", and {stats.delayed:,} delayed until due" if stats.delayed else ""
    print(f"queue {name!r}: nothing is held. Holds live only in the memory of the process that "
          f"took them, so with no process open {counted(stats.ready or 0, 'stored item')} "
          f"{'is' if stats.ready == 1 else 'are'} ready already{waiting}.")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with open_for_change(args.path, args.name) as q:
        what = "dead letter" if args.dead else "ready item"
        count = q.dead_count() if args.dead else q.qsize()
        if not count:
            print(f"queue {q.name!r} has no {what}s; nothing to purge")
            return 0
        if not confirm(args, f"delete {counted(count, what)} of {q.name!r} for good"):
            return 1
        if args.dead:
            q.purge_dead()
            removed = count
        elif isinstance(q, LiveQueue):
            removed = q.purge_ready()
        else:
            removed = purge_ready(q, Progress("purged"))
        print(f"purged {counted(removed, what)} of queue {q.name!r}")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    """Pack the whole file (every queue in it: a pack is file-wide); sizes as ``ls`` shows them."""
    if is_uri(args.path):
        raise CommandError("pack works on a FileStorage file; pack a server's storage with "
                           "its own tool: ZEO's zeopack, RelStorage's zodbpack")
    with QueueFile(args.path) as qf:
        name = args.name if args.name is not None else qf.names()[0]
        qf.record(name)
        kind = qf.kind(name)
        serializer = qf.serializer(name)
        owner = requested_of(qf)
    if owner is not None:
        before = os.path.getsize(args.path)
        LiveQueue(args.path, name, owner).pack()
        print(f"packed {args.path} (every queue in it): {before:,} -> "
              f"{os.path.getsize(args.path):,} bytes, in process {owner}")
        return 0
    before = os.path.getsize(args.path)
    print(f"packing {args.path} ({before:,} bytes)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    with open_queue(kind, args.path, name, autopack=False, serializer=serializer) as q:
        _with_file_progress(q.pack, args.path + ".pack", before, Progress("packed bytes"))
    after = os.path.getsize(args.path)  # closed: what is left is what ls shows
    print(f"packed {args.path} (every queue in it): {before:,} -> {after:,} bytes in "
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
        pid, served = qf.live_pid, qf.served
    if pid is not None:
        if served:
            where_used = "in use by processes that share it"
            users = (f"them (ackqueue stats {shlex.quote(args.path)} lists their sessions; "
                     "its server stops by itself once they are gone)")
        else:
            where_used = f"open in process {pid}" if pid > 0 else "open in another process"
            users = f"process {pid}" if pid > 0 else "that process"
        again = shlex.join(["ackqueue", "drop", args.path, "--name", args.name, "--yes"])
        raise CommandError(
            f"{args.path} is {where_used}: drop deletes a queue that a live process may be "
            f"using, so it needs the file to itself. Stop {users}, then run: {again}"
        )
    contents = f"{counted(stored, 'stored item')} and {counted(dead, 'dead letter')}"
    if not confirm(args, f"delete queue {args.name!r} of {args.path} with its {contents}"):
        return 1
    db = new_db(open_file_storage(os.path.realpath(args.path)))  # takes the lock: no live user
    try:
        with db.transaction() as conn:
            del queues_of(conn.root(), create=False)[args.name]
    finally:
        db.close()
    left = ", ".join(repr(n) for n in others) or "none"
    print(f"dropped queue {args.name!r} ({contents}); queues left: {left}. "
          "Its space is freed by the next pack.")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    """Stop handing out items (stored: every process sees it, and it holds after a restart)."""
    return _set_paused(args, True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_paused(args, False)


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    with open_for_change(args.path, args.name) as q:
        if q.paused == paused:
            print(f"queue {q.name!r} is {'paused already' if paused else 'not paused'}")
            return 0
        if paused:
            q.pause()
            print(f"paused queue {q.name!r}: no item is handed out until 'ackqueue resume'")
        else:
            q.resume()
            print(f"resumed queue {q.name!r}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Drop waiting items by the key they were put with (``q.remove``: names them, so no
    --yes), or every waiting item of a group (``--group``, after ``--yes``)."""
    if args.group is not None:
        return remove_group(args)
    with open_for_change(args.path, args.name) as q:
        for key in args.key:
            q.remove(key.encode() if args.bytes else key)
            print(f"removed the item with key {key!r} from queue {q.name!r}")
    return 0
