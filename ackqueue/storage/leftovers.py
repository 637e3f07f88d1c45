"""Files FileStorage leaves beside a queue file that nothing will read again.

* ``<file>.tmp``: FileStorage's scratch file for the first phase of a commit. It is created
  (truncated) by every writable open and closed, never removed, by ``close()``: after close it
  is dead weight, and the next open makes a new one.
* ``<file>.tr0``, ``.tr1``, ...: when an open finds that the file's last transaction never
  finished (cut short by a crash or power loss, or still flagged ``c``, checkpoint, as it is
  between a commit's vote and its finish), ``read_index`` copies that tail to the first free
  ``.trN`` name and truncates the file (``FileStorage._truncate``). ZODB offers no option to
  skip the copy. When the copy is only that unfinished commit (one transaction, still flagged
  ``c`` or cut short), nothing in it was promised to anyone: the copy made by our own open is
  removed (a warning says so). But FileStorage cuts the same way at a damaged byte in the
  middle of the file (a wrong transaction length or status, read when a kill -9 left the index
  stale), and then the copy holds every commit after it, puts and acks that returned. Such a
  copy is kept, with the file as it was cut (``.trN.before``), and an error names both and the
  command that puts its items back (``ackqueue salvage``). Copies that were there before (an
  earlier version, ``fsrecover``) are left alone.

``.index`` (fast reopen) and ``.lock`` (zc.lockfile leaves the file; removing it would race
with another opener) stay.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import struct

from ZODB.FileStorage.format import TRANS_HDR, TRANS_HDR_LEN

log = logging.getLogger("ackqueue")


def truncation_copies(path: str) -> set[str]:
    """The ``.trN`` files beside ``path`` now."""
    return {
        name for name in glob.glob(glob.escape(path) + ".tr*") if name[len(path) + 3 :].isdigit()
    }


def remove_new_truncation_copies(path: str, before: set[str]) -> None:
    """Remove the ``.trN`` copies that opening ``path`` just made (those not in ``before``),
    when they hold only the unfinished last commit; keep the others for ``ackqueue salvage``."""
    for name in sorted(truncation_copies(path) - before):
        try:
            with open(name, "rb") as f:
                tail = f.read()
        except OSError as exc:
            log.error("could not read %s, the tail FileStorage cut from %s: %s", name, path, exc)
            continue
        if not only_an_unfinished_commit(tail):
            _keep_for_salvage(path, name, len(tail))
            continue
        try:
            os.remove(name)
        except OSError as exc:
            log.warning("could not remove %s, the tail of an unfinished commit: %s", name, exc)
            continue
        log.warning(
            "%s ended in a commit that never finished (%d bytes, from a crash during a "
            "commit); it was dropped, as no put or ack of it had returned",
            path,
            len(tail),
        )


def only_an_unfinished_commit(tail: bytes) -> bool:
    """Whether a tail FileStorage cut holds no finished transaction: one commit still flagged
    ``c`` (between its vote and its finish) with nothing after it, or a piece in which no whole
    finished transaction can be found (a commit cut short by a crash).

    A finished transaction ends with its length repeated; walking that chain back from the
    end finds the finished ones. A damaged length in the first header (the byte that made
    FileStorage cut) is why the first one is also accepted when it spans the whole tail.
    """
    if len(tail) < TRANS_HDR_LEN:
        return True
    _tid, length, status, *_ = struct.unpack(TRANS_HDR, tail[:TRANS_HDR_LEN])
    if status == b"c" and len(tail) <= length + 8:
        return True
    end = len(tail)
    while end >= TRANS_HDR_LEN + 8:
        (length,) = struct.unpack(">Q", tail[end - 8 : end])
        start = end - 8 - length
        if length < TRANS_HDR_LEN or start < 0:
            return True
        _tid, header_length, status, *_ = struct.unpack(
            TRANS_HDR, tail[start : start + TRANS_HDR_LEN]
        )
        if header_length != length and start != 0:
            return True
        if status in (b" ", b"p", b"u"):
            return False
        end = start  # a commit still flagged "c": look at the one before it
    return True


def _keep_for_salvage(path: str, name: str, size: int) -> None:
    """Keep a cut tail that holds finished commits, with the file as FileStorage cut it."""
    base = name + BEFORE_SUFFIX
    try:
        copy_exclusively(path, base)
    except OSError as exc:
        base_note = f"(the file as it was cut could not be saved to {base}: {exc})"
    else:
        base_note = f"and the file as it was cut in {base}"
    log.error(
        "%s is damaged: FileStorage cut it at byte %d and saved the %d bytes after that "
        "point, which hold commits that had returned (puts and acks), in %s %s. Those items "
        "are missing from the queue until you run: ackqueue salvage %s --into %s",
        path,
        os.path.getsize(path),
        size,
        name,
        base_note,
        name,
        path,
    )


BEFORE_SUFFIX = ".before"


def copy_exclusively(source: str, target: str) -> None:
    """Copy ``source`` to a new file ``target``, fsynced; never through a planted link."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, open(source, "rb") as f:
        shutil.copyfileobj(f, out)
        out.flush()
        os.fsync(out.fileno())


def remove_commit_scratch(path: str) -> None:
    """Remove FileStorage's ``.tmp`` once the storage on ``path`` is closed."""
    with contextlib.suppress(OSError):
        os.remove(path + ".tmp")
