"""A queue dropped without ``close()``: once collected, it lets go of what it had open.

Code written for ``queue.Queue`` never closes its queues. When such a queue is garbage-collected
its reader connection is closed, its name is free again, and, with the last queue of a file,
the file is closed and unlocked, so the same process or another one can open it. What it held
goes back as on close: in one process holds live only in memory, so the stored entries are
ready for whoever opens the queue next; in shared mode its stored holds are given back.

The finalizer runs wherever the collector ran, possibly in a thread in the middle of a commit or
holding the registry lock, where closing the file would deadlock. There the work is handed to a
short-lived thread; in an ordinary caller thread (``del q; gc.collect()``) it is done at once,
so the file is free when the collection returns.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ackqueue.queue import status
from ackqueue.shared import sessions

if TYPE_CHECKING:
    from ackqueue.queue.queues import AckQueue
    from ackqueue.storage.store import Store

INTERNAL_THREADS = "ackqueue-"  # the prefix of every thread ackqueue starts


def watch(queue: AckQueue, claim: object) -> weakref.finalize:
    """Clean up after ``queue`` if it is collected while open; ``close()`` detaches this."""
    shared = queue._shared
    # Nothing given to the finalizer may lead back to the queue, or it would never be collected:
    # the session and the dict of stored holds, not the SharedQueue that holds the queue.
    shared_state = None if shared is None else (shared.session, shared.mine)
    finalizer = weakref.finalize(
        queue,
        _dropped,
        queue._store,
        queue.name,
        claim,
        queue._reader,
        queue._reader_tm,
        status.storage_file(queue),
        shared_state,
    )
    finalizer.atexit = False  # at exit, storage.py and sessions.py close everything anyway
    return finalizer


def _dropped(store: Store, *state: Any) -> None:
    if state[-1] is None and _can_close_here(store):
        _clean_up(store, *state)
        return
    # At interpreter shutdown no thread can start; the exit handlers close the storage.
    with contextlib.suppress(RuntimeError):
        threading.Thread(
            target=_clean_up, args=(store, *state), name="ackqueue-dropped", daemon=True
        ).start()


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
    reader: Any,
    reader_tm: Any,
    status_file: str | None,
    shared_state: tuple[Any, dict[Any, Any]] | None,
) -> None:
    try:
        reader_tm.abort()
        reader.close()
    finally:
        try:
            if shared_state is not None:
                session, mine = shared_state
                for key, value in list(mine.items()):
                    session.release_later(name, key, value)
                mine.clear()
                sessions.release(session)
        finally:
            if status_file is not None:
                status.beacon.forget_dropped(status_file)
            store.release_dropped(name, claim)
