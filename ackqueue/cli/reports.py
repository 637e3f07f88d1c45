"""What reading a queue file from outside reports (see :mod:`ackqueue.inspection`): plain
dataclasses that the command line prints as text or as JSON."""

from __future__ import annotations

import json
import pickle
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from ackqueue.records import DeadRecord
from ackqueue.storage.items import JSON, PICKLE


@dataclass
class HeldItem:
    owner: str  # a thread's name, or in shared mode the session id
    delivery_id: int
    attempts: int
    age: float | None  # unknown for holds stored in shared mode
    key: str


@dataclass
class SessionInfo:
    """A process's session on a shared storage (see :mod:`ackqueue.sessions`)."""

    id: str
    host: str
    pid: int
    lease: float
    renewed_age: float | None  # seconds since its last renewal, by this host's clock
    lapsed: bool  # not renewed for longer than its lease: the next reaper ends it
    held: int
    process_gone: bool = False  # its pid, on this host, runs no more (killed, or ended)


def session_state(s: SessionInfo) -> str:
    """A session's state for people: a process that is gone is said so before its lease ends."""
    if s.lapsed:
        return "LAPSED (reaped by the next live process)"
    if s.process_gone:
        return (f"GONE (process {s.pid} is no longer running; what it holds goes back when its "
                "lease lapses)")
    return "live"


@dataclass
class QueueStats:
    name: str
    kind: str
    stored: int
    ready: int | None
    held: int | None
    delayed: int
    dead: int
    oldest_ready_age: float | None
    oldest_ready_exact: bool = True
    held_items: list[HeldItem] = field(default_factory=list)
    paused: bool = False  # q.pause() / `ackqueue pause`: ready items are not handed out
    serializer: str = "pickle"  # the name the queue record gives its items' serializer
    seen: int | None = None  # keys remembered as done (put(unique=)); None: no seen-set


@dataclass
class StoredItem:
    position: str  # where it stands in the queue's order (the repr of its entry's key)
    item: Any  # the item as JSON shows it (see shown_item); its repr for text
    put_age: float
    attempts: int
    state: str  # ready, held or delayed
    item_is_repr: bool = False  # item is a repr string: the item itself has no JSON form
    queue_paused: bool = False  # the queue is paused: not even a ready item is handed out
    key: str | None = None  # the key it was put with (put(key=)); a bytes key as its repr
    group: str | None = None  # the group it was put with (put(group=))
    due_in: float | None = None  # a delayed item: seconds until it may be delivered
    size: int = 0  # bytes of its stored pickle
    item_truncated: bool = False  # item is its repr cut short (peek --whole shows it all)


@dataclass
class DeadItem:
    id: str
    item: Any  # as in StoredItem
    attempts: int
    reason: str | None
    when: float | None
    item_is_repr: bool = False
    item_truncated: bool = False


def paused_text(path: str, name: str) -> str:
    """What a paused queue's listing says, once, beside its name: what to type to resume."""
    named = "" if name == "default" else f" --name {shlex.quote(name)}"
    resume = f"ackqueue resume {shlex.quote(path)}{named}"
    return f"PAUSED: nothing is handed out until resumed ({resume})"


def age_text(seconds: float | None) -> str:
    """An age for people: seconds, minutes or hours, one decimal; "-" when unknown."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def counted(n: int, noun: str) -> str:
    """``n`` with thousands separators and ``noun`` in the singular or plural, as ``n`` asks."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def shown_item(
    item_data: bytes, limit: int | None, as_json: bool, serializer: str = PICKLE
) -> tuple[Any, bool, bool]:
    """An item for display, whether it is a repr string standing in for it, and whether that
    repr was cut to ``limit`` characters (None: never).

    For JSON (``as_json``), an item that JSON carries unchanged (it reads back equal: no
    tuples, no non-string keys, no NaN) and whose JSON fits in ``limit`` is given as itself;
    any other item as its repr. For text, always its repr. ``serializer`` is the name the
    queue record gives: a pickle is loaded (it is code: the reading commands trust the file
    as much as the queue does), JSON is parsed, and bytes of a caller's serializer, which
    this program does not have, are described.
    """
    try:
        if serializer == PICKLE:
            item = pickle.loads(item_data)
        elif serializer == JSON:
            item = json.loads(item_data)
        else:
            return (f"<{len(item_data)} bytes encoded by serializer {serializer!r}>",
                    True, False)
    except Exception as exc:
        return f"<cannot load: {type(exc).__name__}: {exc}>", True, False
    if as_json:
        try:
            text = json.dumps(item, allow_nan=False)
            if (limit is None or len(text) <= limit) and json.loads(text) == item:
                return item, False, False
        except (TypeError, ValueError, RecursionError):
            pass
    text = repr(item)
    if limit is not None and len(text) > limit:
        return text[: limit - 3] + "...", True, True
    return text, True, False


def as_json(value: Any) -> Any:
    """Dataclasses (and lists of them) as plain JSON-ready values."""
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return asdict(value)



def dead_item(
    key: Any, letter: DeadRecord, limit: int | None, for_json: bool = False,
    serializer: str = PICKLE,
) -> DeadItem:
    item, is_repr, truncated = shown_item(letter.data, limit, for_json, serializer)
    return DeadItem(
        id=repr(key),
        item=item,
        item_is_repr=is_repr,
        item_truncated=truncated,
        attempts=int(letter.attempts),
        reason=letter.reason,
        when=letter.when,
    )
