"""What reading a queue file from outside reports (see :mod:`ackqueue.inspection`): plain
dataclasses that the command line prints as text or as JSON."""

from __future__ import annotations

import pickle
from dataclasses import asdict, dataclass, field
from typing import Any


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


@dataclass
class StoredItem:
    key: str
    item: str
    put_age: float
    attempts: int
    state: str  # ready, held or delayed


@dataclass
class DeadItem:
    id: str
    item: str
    attempts: int
    reason: str | None
    when: float | None


def render(item_data: bytes, limit: int | None) -> str:
    try:
        text = repr(pickle.loads(item_data))
    except Exception as exc:
        return f"<cannot load: {type(exc).__name__}: {exc}>"
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def as_json(value: Any) -> Any:
    """Dataclasses (and lists of them) as plain JSON-ready values."""
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return asdict(value)



def dead_item(key: Any, letter: Any, limit: int | None) -> DeadItem:
    data = getattr(letter, "data", None)
    item = render(data, limit) if isinstance(data, bytes) else repr(getattr(letter, "item", letter))
    return DeadItem(
        id=repr(key),
        item=item,
        attempts=int(getattr(letter, "attempts", 0)),
        reason=getattr(letter, "reason", None),
        when=getattr(letter, "when", getattr(letter, "dead_at", None)),
    )
