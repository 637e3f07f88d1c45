"""Hold marks in shared mode: which session holds which stored entry.

A hold is marked on the entry itself, its ``holder`` ``(session id, delivery token)``, and
listed under its session in ``root[HOLDS_KEY][session id]`` so that a reaper finds a dead
session's holds without reading every entry. Every function here runs inside a change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from BTrees.OOBTree import OOBTree

from ackqueue.errors import LeaseExpiredError, NotHeldError
from ackqueue.records import edge_loaded
from ackqueue.shared.sweeping import SESSIONS_KEY

HOLDS_KEY = "ackqueue.holds"  # session id -> {(queue name, entry key): token}

HoldValue = tuple[str, int]  # (session id, delivery token)
Edit = Callable[[], None]


def record_of(root: Any, name: str) -> Any:
    """The record of queue ``name``, or None."""
    queues = root.get("ackqueue")
    return queues.get(name) if queues is not None else None


def entry_of(root: Any, name: str, key: Any) -> Any:
    record = record_of(root, name)
    return record.entry(key) if record is not None else None


def holder(entry: Any) -> HoldValue | None:
    """Who holds a stored entry in shared mode: ``(session id, token)``, or None."""
    return getattr(entry, "holder", None)


def live_holder(entry: Any, sessions: Any) -> HoldValue | None:
    """Who holds a stored entry, if that session is still listed in ``sessions`` (the stored
    sessions tree; None: not made yet). A hold under a session no longer listed is void: a
    session leaves the list only when it ends (its holds cleared first) or is reaped, and a
    take that checked its session was live just before a reap committed its hold after it,
    under a session no reap would ever look at again."""
    value = holder(entry)
    if value is None or sessions is None or value[0] in sessions:
        return value
    return None


def live_hold_in(root: Callable[[], Any]) -> Callable[[Any], HoldValue | None]:
    """``live(entry)`` for edits that must pass over held entries (a removal, a replace by
    key): :func:`live_holder` against the sessions tree of ``root()``, read inside the edit,
    so that an entry under a void hold is free to them as it is to a get."""

    def live(entry: Any) -> HoldValue | None:
        if holder(entry) is None:
            return None  # (most entries: the sessions tree is not even looked up)
        return live_holder(entry, root().get(SESSIONS_KEY))

    return live


def holds_of_queue(holds_by_session: Any, name: str) -> list[Any]:
    """For each session in ``holds_by_session`` (the stored tree at HOLDS_KEY; None or empty:
    none), the keys of its holds on queue ``name``, a lazy range of its tree: each session
    lists its holds of every queue of the database in one tree, keyed ``(queue name, entry
    key)``, so this queue's are one range of it. Each tree's edge is loaded first (see
    :func:`~ackqueue.records.edge_loaded`)."""
    if not holds_by_session:
        return []
    first, beyond = (name,), (name + "\0",)  # (name,) < (name, any key) < (name + "\0",)
    return [
        edge_loaded(mine).keys(min=first, max=beyond, excludemax=True)
        for mine in edge_loaded(holds_by_session).values()
    ]


def held_in_queue(holds_by_session: Any, name: str) -> int:
    """How many holds on queue ``name`` the sessions of ``holds_by_session`` list."""
    return sum(len(keys) for keys in holds_of_queue(holds_by_session, name))


def set_hold(root: Any, name: str, key: Any, value: HoldValue, attempts: int) -> None:
    """Mark entry ``key`` held, its deliveries now ``attempts`` (inside a change), and list
    it under its session.

    The mark is on the entry itself, which has no conflict resolution: two processes changing
    what one item is doing at the same time always conflict (and one retries), while changes
    to different items touch different objects. The per-session list (written by that session
    only, or by whoever reaps it) is how a reaper finds a dead session's holds.
    """
    record_of(root, name).change_entry(key, holder=value, attempts=attempts)
    holds_by_session = root[HOLDS_KEY]
    mine = holds_by_session.get(value[0])
    if mine is None:
        mine = holds_by_session[value[0]] = OOBTree()
    mine[(name, key)] = value[1]


def clear_hold(root: Any, name: str, key: Any, value: HoldValue | None = None) -> bool:
    """Clear the hold on entry ``key`` (if it is still ``value``, when given)."""
    record = record_of(root, name)
    entry = record.entry(key) if record is not None else None
    current = holder(entry) if entry is not None else None
    if current is None or (value is not None and current != value):
        return False
    record.change_entry(key, holder=None)
    mine = root[HOLDS_KEY].get(current[0])
    if mine is not None and (name, key) in mine:
        del mine[(name, key)]
    return True


def drop_session_holds(root: Any, sid: str) -> None:
    """Clear every hold of session ``sid`` (inside a change): its items are ready in place."""
    holds_by_session = root[HOLDS_KEY]
    mine = holds_by_session.get(sid)
    if mine is None:
        return
    for name, key in list(edge_loaded(mine).keys()):
        record = record_of(root, name)
        entry = record.entry(key) if record is not None else None
        current = holder(entry) if entry is not None else None
        if current is not None and current[0] == sid:
            record.change_entry(key, holder=None)
    del holds_by_session[sid]


def check_holds(
    record: Any,
    name: str,
    expected: list[tuple[Any, HoldValue | None, int]],
    session_lost: Callable[[str | None], bool] = lambda sid: False,
) -> None:
    """Inside a change: every ``(key, hold, token)`` of queue ``name`` (its ``record``) is still
    held so, by this session with this token (fencing); else raise, changing nothing.

    ``session_lost(sid)`` says whether the stored sessions no longer list the holding one: an
    item acked elsewhere after that session was reaped was lost with the lease
    (LeaseExpiredError), while one acked under a live session was acked by its own earlier
    try."""
    for key, value, token in expected:
        entry = record.entry(key)
        if value is None or value[1] != token or entry is None or holder(entry) != value:
            if (entry is None or entry.done) and not session_lost(value[0] if value else None):
                raise NotHeldError(
                    f"this item of queue {name!r} is no longer stored: it was acked "
                    "already (by an earlier try whose commit outcome was lost with the "
                    "connection, or by another consumer after this one lost its hold)"
                )
            raise LeaseExpiredError(
                f"the hold on this item of queue {name!r} was lost (this process was "
                "stopped or cut off longer than its session lease, and the item went "
                "back to the queue and may have been delivered to another consumer); "
                "nothing was changed"
            )


def fencer(
    record: Any,
    name: str,
    expected: list[tuple[Any, HoldValue | None, int]],
    session_lost: Callable[[str | None], bool] = lambda sid: False,
) -> Edit:
    """The check, to run inside a commit, that every hold in ``expected`` is still so
    (:func:`check_holds`)."""

    def check() -> None:
        check_holds(record, name, expected, session_lost)

    return check


def unholder(root: Callable[[], Any], name: str, keys: list[Any]) -> Edit:
    """The edit clearing the holds of queue ``name`` on ``keys`` (``root()``: the connection's
    root at the time the edit runs)."""

    def unhold() -> None:
        for key in keys:
            clear_hold(root(), name, key)

    return unhold
