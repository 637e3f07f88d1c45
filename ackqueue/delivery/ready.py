"""Which stored entries are ready to hand out, in delivery order, without loading them all.

At open, every stored entry is ready (holds live only in memory), so the *backlog* is read
lazily from the stored tree, in key order, behind a cursor, a few dozen keys per read (each
read first catches the reader up with the commits since the last one and reloads the tree
nodes they rewrote, so one read per get was a third of a get+ack). Keys that become ready later
(new puts, nacks, released holds) go into an in-memory heap. The next entry to deliver is
the smaller of the heap's top and the next backlog key behind the cursor. A key written in
this session is never taken from the backlog scan: it reaches the heap when its put commits.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

Key = Any
ScanAfter = Callable[[Key], list[Key]]


class ReadyKeys(Protocol):
    """The ready keys of a queue in delivery order, as the supply uses them (single-process
    mode: :class:`ReadyIndex`; shared mode keeps its own, read from the stored tree)."""

    @property
    def cursor(self) -> Any: ...

    def __len__(self) -> int: ...

    def total(self) -> int:
        """Ready keys, also those that may not be handed out now (of a paused or capped
        group, in shared mode, where the stored entries say their group): what ``maxsize``
        counts."""
        ...

    def push(self, key: Key) -> None: ...

    def offer(self, key: Key) -> None: ...

    def peek(self) -> Key: ...

    def pop(self) -> Key: ...

    def withdraw(self, key: Key, backlog: bool) -> bool:
        """Take ready ``key`` out so that it is not handed out (``backlog``: it was stored
        before this session). False if it is held or being handed out here."""
        ...


class ReadyIndex:
    def __init__(
        self,
        backlog: int,
        scan_after: ScanAfter,
    ) -> None:
        """``scan_after(key)``: the next few backlog keys after ``key`` (None: from the
        start), in order; an empty list when there are none."""
        self._backlog = backlog
        self._scan_after = scan_after
        self._cursor: Any = None  # None: the scan has not started
        # Backlog keys read ahead of the cursor. Backlog keys leave only through pop(), so
        # what was read stays true.
        self._upcoming: deque[Key] = deque()
        self._heap: list[Key] = []

    @property
    def cursor(self) -> Any:
        """The last key taken from the backlog (None before the first): every backlog key
        after it is still undelivered."""
        return self._cursor

    def __len__(self) -> int:
        return self._backlog + len(self._heap)

    def total(self) -> int:
        return len(self)  # the groups are the grouped index's (delivery/groups.py)

    def push(self, key: Key) -> None:
        """Make ``key`` ready again, or for the first time."""
        heapq.heappush(self._heap, key)

    def offer(self, key: Key) -> None:
        """A key newly stored or fallen due is ready (in one process: the same as a push)."""
        heapq.heappush(self._heap, key)

    def peek(self) -> Key:
        """The key :meth:`pop` would return (the index must not be empty)."""
        upcoming = self._peek_backlog()
        if self._heap and (not upcoming or self._heap[0] < upcoming[0]):
            return self._heap[0]
        return upcoming[0]

    def pop(self) -> Key:
        """Remove and return the first ready key (the index must not be empty)."""
        upcoming = self._peek_backlog()
        if self._heap and (not upcoming or self._heap[0] < upcoming[0]):
            return heapq.heappop(self._heap)
        self._cursor = upcoming.popleft()
        self._backlog -= 1
        return self._cursor

    def discard(self, key: Key) -> bool:
        """Take a ready key out of the index (for removing items by key); True if found."""
        if key in self._heap:
            self._heap.remove(key)
            heapq.heapify(self._heap)
            return True
        return False

    def withdraw(self, key: Key, backlog: bool) -> bool:
        if self.discard(key):
            return True
        if not backlog or self._backlog <= 0 or (self._cursor is not None and key <= self._cursor):
            return False  # taken from the backlog already: held, or being handed out
        if key in self._upcoming:
            self._upcoming.remove(key)
        self._backlog -= 1
        return True

    def _peek_backlog(self) -> deque[Key]:
        """The backlog keys read ahead (empty when the backlog is)."""
        upcoming = self._upcoming
        if self._backlog <= 0:
            upcoming.clear()
        elif not upcoming:
            upcoming.extend(self._scan_after(self._cursor)[: self._backlog])
            if not upcoming:
                # The stored tree holds fewer old entries than counted (counted wrong at
                # open, or changed under us): trust the tree.
                self._backlog = 0
        return upcoming
