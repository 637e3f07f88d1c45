"""Which stored entries are ready to hand out, in delivery order, without loading them all.

At open, every stored entry is ready (holds live only in memory), so the *backlog* is read
lazily from the stored tree, in key order, behind a cursor. Keys that become ready later
(new puts, nacks, released holds) go into an in-memory heap. The next entry to deliver is
the smaller of the heap's top and the next backlog key behind the cursor. A key written in
this session is never taken from the backlog scan: it reaches the heap when its put commits.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

Key = Any
_NOTHING = object()


class ReadyIndex:
    def __init__(
        self,
        backlog: int,
        scan_after: Callable[[Key], Iterator[Key]],
        is_from_backlog: Callable[[Key], bool],
    ) -> None:
        self._backlog = backlog
        self._scan_after = scan_after
        self._is_from_backlog = is_from_backlog
        self._cursor: Any = None  # None: the scan has not started
        self._next_backlog: Any = _NOTHING
        self._heap: list[Key] = []

    @property
    def cursor(self) -> Any:
        """The last key taken from the backlog (None before the first): every backlog key
        after it is still undelivered."""
        return self._cursor

    def __len__(self) -> int:
        return self._backlog + len(self._heap)

    def push(self, key: Key) -> None:
        """Make ``key`` ready again, or for the first time."""
        heapq.heappush(self._heap, key)

    def offer(self, key: Key) -> None:
        """A key newly stored or fallen due is ready (in one process: the same as a push)."""
        self.push(key)

    def peek(self) -> Key:
        """The key :meth:`pop` would return (the index must not be empty)."""
        nxt = self._peek_backlog()
        if self._heap and (nxt is _NOTHING or self._heap[0] < nxt):
            return self._heap[0]
        return nxt

    def pop(self) -> Key:
        """Remove and return the first ready key (the index must not be empty)."""
        nxt = self._peek_backlog()
        if self._heap and (nxt is _NOTHING or self._heap[0] < nxt):
            return heapq.heappop(self._heap)
        self._cursor, self._next_backlog = nxt, _NOTHING
        self._backlog -= 1
        return nxt

    def discard(self, key: Key) -> bool:
        """Take a ready key out of the index (for removing items by key); True if found."""
        if key in self._heap:
            self._heap.remove(key)
            heapq.heapify(self._heap)
            return True
        return False

    def _peek_backlog(self) -> Any:
        if self._backlog <= 0:
            return _NOTHING
        if self._next_backlog is _NOTHING:
            for key in self._scan_after(self._cursor):
                if self._is_from_backlog(key):
                    self._next_backlog = key
                    break
            else:
                # The stored tree holds fewer old entries than counted (counted wrong at
                # open, or changed under us): trust the tree.
                self._backlog = 0
        return self._next_backlog
