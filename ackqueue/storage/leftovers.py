"""Files FileStorage leaves beside a queue file that nothing will read again.

* ``<file>.tmp``: FileStorage's scratch file for the first phase of a commit. It is created
  (truncated) by every writable open and closed, never removed, by ``close()``: after close it
  is dead weight, and the next open makes a new one.
* ``<file>.tr0``, ``.tr1``, ...: when an open finds that the file's last transaction never
  finished (cut short by a crash or power loss, or still flagged ``c``, checkpoint, as it is
  between a commit's vote and its finish), ``read_index`` copies that tail to the first free
  ``.trN`` name and truncates the file (``FileStorage._truncate``). ZODB offers no option to
  skip the copy. For a queue the tail is a commit that never returned, so nothing in it was
  promised to anyone: the copy made by our own open is removed (a warning says so); copies
  that were there before (an earlier version, ``fsrecover``) are left alone.

``.index`` (fast reopen) and ``.lock`` (zc.lockfile leaves the file; removing it would race
with another opener) stay.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os

log = logging.getLogger("ackqueue")


def truncation_copies(path: str) -> set[str]:
    """The ``.trN`` files beside ``path`` now."""
    return {
        name for name in glob.glob(glob.escape(path) + ".tr*") if name[len(path) + 3 :].isdigit()
    }


def remove_new_truncation_copies(path: str, before: set[str]) -> None:
    """Remove the ``.trN`` copies that opening ``path`` just made (those not in ``before``)."""
    for name in truncation_copies(path) - before:
        try:
            size = os.path.getsize(name)
            os.remove(name)
        except OSError as exc:
            log.warning("could not remove %s, the tail of an unfinished commit: %s", name, exc)
            continue
        log.warning(
            "%s ended in a commit that never finished (%d bytes, from a crash during a "
            "commit); it was dropped, as no put or ack of it had returned",
            path,
            size,
        )


def remove_commit_scratch(path: str) -> None:
    """Remove FileStorage's ``.tmp`` once the storage on ``path`` is closed."""
    with contextlib.suppress(OSError):
        os.remove(path + ".tmp")
