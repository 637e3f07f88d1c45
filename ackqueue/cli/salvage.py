"""``ackqueue salvage FILE.trN --into FILE``: put back the items of commits FileStorage cut off.

When a queue file is damaged in the middle (a wrong byte in a transaction header, read after a
kill -9 left the index stale), FileStorage cuts the file at the damage on open and saves the
rest as ``FILE.trN``; ackqueue keeps that copy, with the file as it was cut
(``FILE.trN.before``), when it holds commits that had returned (storage/filestorage.py). This
command joins the two, puts right the damaged header (its length is repeated at the end of
its transaction; where that cannot be done, ZODB's own ``fsrecover`` skips what it cannot
read), and puts into ``FILE`` every item the joined file holds that the cut file did not: the
items of the puts after the damage that were not acked after it. Acks after the damage, lost
from ``FILE`` meanwhile, give their items again (at least once). Salvaged items
are put without the ``key=`` or ``priority=`` they were put with. Both copies are renamed
``.salvaged`` afterwards, so that a second run cannot put the items twice.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any

from ackqueue.cli.common import CommandError, open_queue
from ackqueue.cli.inspection import QueueFile
from ackqueue.storage.filestorage import BEFORE_SUFFIX, rejoin_cut_file
from ackqueue.storage.items import unpickle_item

SALVAGED_SUFFIX = ".salvaged"


def add_command(commands: Any) -> None:
    help = "put back the items of a damaged file's cut-off commits (FILE.trN) into FILE"
    sub = commands.add_parser("salvage", help=help, description=help)
    sub.set_defaults(func=cmd_salvage)
    sub.add_argument("path", metavar="FILE.trN", help="the copy named in ackqueue's error")
    sub.add_argument("--into", required=True, metavar="FILE", help="the queue file")


def cmd_salvage(args: argparse.Namespace) -> int:
    tail, into = args.path, args.into
    before = tail + BEFORE_SUFFIX
    if os.path.exists(tail + SALVAGED_SUFFIX):
        raise CommandError(f"{tail} was salvaged already (see {tail}{SALVAGED_SUFFIX})")
    for needed in (tail, before):
        if not os.path.isfile(needed):
            raise CommandError(
                f"no {needed}: salvage needs the copy FileStorage cut off and the file as it "
                "was cut, both kept by ackqueue when it opened the damaged file"
            )
    with tempfile.TemporaryDirectory(prefix="ackqueue-salvage-") as scratch:
        recovered = os.path.join(scratch, "recovered.fs")
        rejoin_cut_file(before, tail, recovered)
        cut = os.path.join(scratch, "cut.fs")
        shutil.copy(before, cut)
        missing = _missing_items(recovered, cut)
    now = time.time()
    count = 0
    for (name, kind), entries in missing.items():
        with open_queue(kind, into, name) as q:
            for entry in entries:
                due = getattr(entry, "not_before", 0.0)
                q.put(
                    unpickle_item(entry.data, f"an item of {tail}"),
                    delay=max(0.0, due - now) or None,
                    group=getattr(entry, "group", None),
                )
                count += 1
    for done in (tail, before):
        os.rename(done, done + SALVAGED_SUFFIX)
    print(f"put {count} item(s) from {tail} back into {into}")
    return 0


def _missing_items(recovered: str, cut: str) -> dict[tuple[str, str], list[Any]]:
    """The entries of each queue in ``recovered`` that ``cut`` does not hold."""
    found: dict[tuple[str, str], list[Any]] = {}
    for path in (recovered, cut):
        _settle(path)
    with QueueFile(cut) as base:
        had = {
            (name, repr(key), entry.data, entry.put_at)
            for name in base.names()
            for key, entry in base.entries(base.record(name), None, 0)
        }
    with QueueFile(recovered) as qf:
        for name in qf.names():
            fresh = [
                entry
                for key, entry in qf.entries(qf.record(name), None, 0)
                if (name, repr(key), entry.data, entry.put_at) not in had
            ]
            if fresh:
                found[(name, qf.kind(name))] = fresh
    return found


def _settle(path: str) -> None:
    """Open and close each queue of ``path`` once (scratch copies), so that what an open puts
    in order after a kill -9 (recent puts, counts) is in the entries that are read."""
    with QueueFile(path) as qf:
        kinds = {name: qf.kind(name) for name in qf.names()}
    for name, kind in kinds.items():
        open_queue(kind, path, name).close()
