"""Items that are stored but not yet due (``put(delay=)``, ``not_before=``, ``nack(delay=)``).

A delayed entry carries its due time (``Entry.not_before``) and is listed in its queue
record's delay index, so that a reopen finds every delayed entry without reading the others.
In memory, entries not yet due wait here until a timer makes them ready. Entries named in the
index at open are kept out of the lazy backlog scan, which would otherwise hand them out early;
those already due at open are ready at once.
"""

from __future__ import annotations

from typing import Any


class Delays:
    def __init__(self, index: Any, now: float) -> None:
        items = list(index.items()) if index is not None else []
        self.at_open: frozenset[Any] = frozenset(key for key, _when in items)
        self.due_at_open: list[Any] = [key for key, when in items if when <= now]
        self.pending: dict[Any, float] = {key: when for key, when in items if when > now}

    def __len__(self) -> int:
        return len(self.pending)
