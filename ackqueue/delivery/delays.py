"""Items that are stored but not yet due (``put(delay=)``, ``not_before=``, ``nack(delay=)``).

A delayed entry carries its due time (``Entry.not_before``) and is listed in its queue
record's delay index, so that a reopen finds every delayed entry without reading the others.
In memory, entries not yet due wait here until a timer makes them ready. Entries named in the
index at open are kept out of the lazy backlog scan, which would otherwise hand them out early;
those already due at open are ready at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Delays:
    """The delayed keys in memory, each under its always-hashable id (``key_id``): a
    PriorityAckQueue key holds the item, which may be a dict or a list."""

    def __init__(
        self, items: list[tuple[Any, float]], now: float, key_id: Callable[[Any], Any]
    ) -> None:
        self._key_id = key_id
        self.at_open: frozenset[Any] = frozenset(key_id(key) for key, _when in items)
        self.due_at_open: list[Any] = [key for key, when in items if when <= now]
        self.pending: dict[Any, tuple[Any, float]] = {
            key_id(key): (key, when) for key, when in items if when > now
        }

    def __len__(self) -> int:
        return len(self.pending)

    def delayed_at_open(self, key: Any) -> bool:
        """Whether ``key`` was in the stored delay index when the queue was opened."""
        return bool(self.at_open) and self._key_id(key) in self.at_open

    def add(self, key: Any, due: float) -> None:
        self.pending[self._key_id(key)] = (key, due)

    def fall_due(self, key: Any) -> bool:
        """Take ``key`` out of the delayed ones; False if it was not there (any more)."""
        return self.pending.pop(self._key_id(key), None) is not None
