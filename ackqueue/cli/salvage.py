"""``ackqueue salvage``: put back the items of a damaged queue file.

``ackqueue salvage FILE --into NEW``: a queue file in which a record cannot be read (a
:class:`~ackqueue.DamagedFileError` names it): every item of it that can still be read is put
into the queue file ``NEW``, with its group and due time; what cannot be read is counted and
named, the dead letters are not copied, and ``FILE`` is left as it is. Its structure is put right
first on a scratch copy where it must be (ZODB's ``fsrecover``).

``ackqueue salvage FILE.trN --into FILE``: put back the items of commits FileStorage cut off.

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
import re
import shutil
import sys
import tempfile
import time
from typing import Any

from ackqueue.cli.common import CommandError, open_queue
from ackqueue.cli.inspection import QueueFile
from ackqueue.errors import DamagedFileError
from ackqueue.records import QUEUE_KINDS
from ackqueue.storage.filestorage import (
    BEFORE_SUFFIX,
    open_file_storage,
    recover_structure,
    rejoin_cut_file,
    restore_magic,
)
from ackqueue.storage.items import unpickle_item

SALVAGED_SUFFIX = ".salvaged"


def add_command(commands: Any) -> None:
    help = (
        "put the items that can still be read from a damaged queue file into a new one, or "
        "those of its cut-off commits (FILE.trN) back into it"
    )
    sub = commands.add_parser("salvage", help=help, description=help)
    sub.set_defaults(func=cmd_salvage)
    sub.add_argument(
        "path", metavar="FILE", help="the damaged queue file, or the FILE.trN copy named in "
        "ackqueue's error"
    )
    sub.add_argument(
        "--into", required=True, metavar="FILE",
        help="the queue file to put the items into (a new one for a damaged FILE)",
    )


def cmd_salvage(args: argparse.Namespace) -> int:
    tail, into = args.path, args.into
    before = tail + BEFORE_SUFFIX
    if not _CUT_COPY.search(tail) and not os.path.exists(before):
        return _copy_readable(tail, into)
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
                due = entry.not_before
                q.put(
                    unpickle_item(entry.data, f"an item of {tail}"),
                    delay=max(0.0, due - now) or None,
                    group=entry.group,
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
            for key, entry in base.stored_entries(base.record(name), None, 0)
        }
    with QueueFile(recovered) as qf:
        for name in qf.names():
            fresh = [
                entry
                for key, entry in qf.stored_entries(qf.record(name), None, 0)
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


_CUT_COPY = re.compile(r"\.tr\d+$")


def _copy_readable(damaged: str, into: str) -> int:
    """Put every item of ``damaged`` that can be read into the queue file ``into``."""
    if not os.path.isfile(damaged):
        raise CommandError(f"no such queue file: {damaged}")
    if os.path.exists(into) and os.path.samefile(damaged, into):
        raise CommandError("--into must name another file than the damaged one (a new file)")
    unreadable: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ackqueue-salvage-") as scratch:
        copy = os.path.join(scratch, "damaged.fs")
        shutil.copy(damaged, copy)
        if os.path.exists(damaged + ".index"):  # the view the queue's own open had
            shutil.copy(damaged + ".index", copy + ".index")
        if restore_magic(copy):
            unreadable.append(f"{damaged}: its first bytes (put right in the copy read)")
        try:
            open_file_storage(copy, read_only=True).close()
        except DamagedFileError as exc:  # its structure: what fsrecover can read of it
            unreadable.append(str(exc).replace(copy, damaged))
            recovered = os.path.join(scratch, "recovered.fs")
            recover_structure(copy, recovered)
            copy = recovered
        found = _readable_items(copy, damaged, unreadable)
    count = 0
    now = time.time()
    for (name, kind), entries in found.items():
        with open_queue(kind, into, name) as q:
            for item, due, group in entries:
                q.put(item, delay=max(0.0, due - now) or None, group=group)
                count += 1
    for why in unreadable[:20]:
        print(f"could not read: {why}", file=sys.stderr)
    print(f"put {count} item(s) from {damaged} into {into}; {len(unreadable)} part(s) of it "
          "could not be read")
    return 0


def _readable_items(
    path: str, shown: str, unreadable: list[str]
) -> dict[tuple[str, str], list[tuple[Any, float, str | None]]]:
    """The items of each queue of ``path`` that load, with their due time and group; what does
    not load is added to ``unreadable``."""
    found: dict[tuple[str, str], list[tuple[Any, float, str | None]]] = {}
    try:
        qf = QueueFile(path)
    except Exception as exc:  # whatever stops it: said, with the file the user named
        raise CommandError(
            f"nothing of {shown} can be read: {str(exc).replace(path, shown)}"
        ) from exc
    with qf:
        for name in qf.names():
            try:
                record = qf.record(name)
                kind = qf.kind(name)
            except Exception as exc:
                unreadable.append(f"queue {name!r}: {exc}")
                continue
            if kind not in QUEUE_KINDS:
                unreadable.append(f"queue {name!r}: its kind {kind!r} (its items go in order)")
                kind = "fifo"
            items = found.setdefault((name, kind), [])
            for entry in record.salvageable_entries(unreadable):
                try:
                    items.append((
                        unpickle_item(entry.data, f"an item of {shown}"),
                        float(entry.not_before),
                        entry.group,
                    ))
                except Exception as exc:
                    unreadable.append(f"an item of queue {name!r}: {exc}")
    return found
