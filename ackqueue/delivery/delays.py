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

from ackqueue.delivery.claims import Staged


class Delays:
    """The delayed keys in memory, each under its always-hashable id (``_key_id``): a
    PriorityAckQueue key holds the item, which may be a dict or a list."""

    def __init__(self, index: Any, now: float, key_id: Callable[[Any], Any]) -> None:
        items = list(index.items()) if index is not None else []
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


class DelayMixin:
    def delayed_count(self: Any) -> int:
        """How many stored items are waiting for their delay to pass (not in ``qsize()``)."""
        with self.mutex:
            return len(self._delays)

    def _due_time(self: Any, delay: float | None, not_before: float | None) -> float:
        if delay is not None and not_before is not None:
            raise ValueError("give delay= or not_before=, not both")
        if delay is not None:
            if delay < 0:
                raise ValueError(f"delay must not be negative, not {delay!r}")
            return self._clock() + delay if delay else 0.0
        return float(not_before or 0.0)

    def _land_locked(self: Any, staged: Staged) -> None:
        self._land_key_locked(staged.key, staged.not_before)

    def _land_key_locked(self: Any, key: Any, due: float) -> None:
        if due and due > self._clock() and not self._drained:
            self._delays.add(key, due)
            self._timers.at(due, self._fall_due_callback(key))
        else:
            self._offer_locked(key)

    def _fall_due_callback(self: Any, key: Any) -> Callable[[], None]:
        def fall_due() -> None:
            if self._delays.fall_due(key):
                self._offer_locked(key)

        return fall_due
