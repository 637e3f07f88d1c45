"""A queue dropped without ``close()``: once collected, it lets go of what it had open.

Code written for ``queue.Queue`` never closes its queues. When such a queue is garbage-collected
its reader connection is closed, its name is free again, and, with the last queue of a file,
the file is closed and unlocked, so the same process or another one can open it. What it held
goes back as on close: in one process holds live only in memory, so the stored entries are
ready for whoever opens the queue next; in shared mode its stored holds are given back (what
the mode's ``dropped()`` returns).

The finalizer runs wherever the collector ran, possibly in a thread in the middle of a commit or
holding the registry lock, where closing the file would deadlock. There the work is handed to a
short-lived thread; in an ordinary caller thread (``del q; gc.collect()``) it is done at once,
so the file is free when the collection returns.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ackqueue.queue import status
from ackqueue.storage.store import Store

INTERNAL_THREADS = "ackqueue-"  # the prefix of every thread ackqueue starts

Step = Callable[[], None]


def watch(
    queue: status.Reporting,
    store: Store,
    name: str,
    claim: object,
    close_book: Step,
    give_back: Step | None,
) -> weakref.finalize[..., Any]:
    """Clean up after ``queue`` if it is collected while open; ``close()`` detaches this.

    Nothing given here may lead back to the queue, or it would never be collected.
    """
    finalizer = weakref.finalize(
        queue, _dropped, store, name, claim, close_book, queue.storage_file, give_back
    )
    finalizer.atexit = False  # at exit, store.py and sessions.py close everything anyway
    return finalizer


def _dropped(
    store: Store,
    name: str,
    claim: object,
    close_book: Step,
    status_file: str | None,
    give_back: Step | None,
) -> None:
    args = (store, name, claim, close_book, status_file, give_back)
    if give_back is None and _can_close_here(store):
        _clean_up(*args)
        return
    # At interpreter shutdown no thread can start; the exit handlers close the storage.
    with contextlib.suppress(RuntimeError):
        threading.Thread(target=_clean_up, args=args, name="ackqueue-dropped", daemon=True).start()


def _can_close_here(store: Store) -> bool:
    """Whether this thread may close the store: it is no thread of ours (a packer, a session,
    a timer, mid-commit work) and the registry is not locked (by this thread, maybe)."""
    if threading.current_thread().name.startswith(INTERNAL_THREADS):
        return False
    return store.registry_free()


def _clean_up(
    store: Store,
    name: str,
    claim: object,
    close_book: Step,
    status_file: str | None,
    give_back: Step | None,
) -> None:
    try:
        close_book()
    finally:
        try:
            if give_back is not None:
                give_back()
        finally:
            if status_file is not None:
                status.beacon.forget_dropped(status_file)
            store.release_dropped(name, claim)
