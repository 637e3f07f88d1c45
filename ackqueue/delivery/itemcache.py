"""Item data a ``get`` can hand out without reading the database.

A get otherwise reads its entry through the queue's reader connection, which first catches up
with every commit since its last read (a commit per ack, so nearly always) and then reloads the
tree nodes those commits rewrote. Two kinds of entries are known not to have changed since
they were read or written, so their pickles can be kept here, consumed by their first delivery:

- entries put in this session, kept as ``put`` commits them;
- entries of the stored backlog just ahead of the scan cursor, read ahead in one go (they are
  delivered in key order and nothing touches them before their first delivery).

Entries are known by their sequence number (keys of a PriorityAckQueue hold the item, which
need not be hashable). Bounded by count and bytes: when full, entries are simply read the slow
way. Code that edits a stored entry in place (its data or attempts) before its first delivery
must :meth:`discard` it.
"""

from __future__ import annotations

from typing import Any

DEFAULT_MAX_ITEMS = 4096
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
# Backlog entries read ahead in one go. Each read-ahead begins with a read that catches the
# reader up with the commits since the last one and reloads the tree bucket they rewrote (every
# ack rewrites it), a cost per read-ahead, not per entry: 16 at a time spent 8 us of a get+ack's
# ~160 there; 64 keep a read-ahead near a millisecond (128 would save ~1 us more, for twice that).
READ_AHEAD = 64


class ItemCache:
    def __init__(
        self, max_items: int = DEFAULT_MAX_ITEMS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._data: dict[Any, tuple[bytes, int]] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def add(self, key: Any, data: bytes, attempts: int) -> bool:
        """Keep ``key``'s stored pickle and attempts; False (and nothing kept) when full."""
        if len(self._data) >= self.max_items or self._bytes + len(data) > self.max_bytes:
            return False
        old = self._data.get(key)
        if old is not None:
            self._bytes -= len(old[0])
        self._data[key] = (data, attempts)
        self._bytes += len(data)
        return True

    def take(self, key: Any) -> tuple[bytes, int] | None:
        """The kept pickle and stored attempts of ``key``, forgotten as they are returned."""
        found = self._data.pop(key, None)
        if found is not None:
            self._bytes -= len(found[0])
        return found

    def discard(self, key: Any) -> None:
        self.take(key)
