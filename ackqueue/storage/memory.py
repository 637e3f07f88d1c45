"""The memory engine: ``AckQueue(None)`` and ``memory://``, a database that lives as long as
the process (tests, scratch work).

``AckQueue(None)`` gets a new :class:`~ZODB.MappingStorage.MappingStorage` each time; a
``memory://`` URI is opened by ``zodburi`` (as every URI spelled its way) and shared, like a
file, by every queue of this process that names it.
"""

from __future__ import annotations

from typing import Any

import ZODB
from ZODB.MappingStorage import MappingStorage

from ackqueue.storage.engine import Engine, new_db, open_through_zodburi


class MemoryEngine(Engine):
    name = "memory"
    schemes = ("memory",)

    def owns(self, storage: Any) -> bool:
        return isinstance(storage, MappingStorage)

    def open(self, where: str, durability: str) -> ZODB.DB:
        return open_through_zodburi(where)

    def new(self) -> ZODB.DB:
        """A database of its own, on a new storage."""
        return new_db(MappingStorage())


MEMORY = MemoryEngine()
