"""In-memory collections of entry keys, filed under each key's always-hashable id.

A PriorityAckQueue's keys are ``(item, seq)`` and its items need not be hashable (dicts,
lists), so a set or dict of keys files them under the queue's ``_key_id(key)`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

V = TypeVar("V")
KeyId = Callable[[Any], Any]


class KeySet:
    """A set of keys."""

    def __init__(self, key_id: KeyId) -> None:
        self._key_id = key_id
        self._ids: set[Any] = set()

    def add(self, key: Any) -> None:
        self._ids.add(self._key_id(key))

    def discard(self, key: Any) -> None:
        self._ids.discard(self._key_id(key))

    def __contains__(self, key: Any) -> bool:
        return self._key_id(key) in self._ids

    def __len__(self) -> int:
        return len(self._ids)


class KeyMap(Generic[V]):
    """A mapping of keys to values."""

    def __init__(self, key_id: KeyId) -> None:
        self._key_id = key_id
        self._pairs: dict[Any, tuple[Any, V]] = {}

    def __setitem__(self, key: Any, value: V) -> None:
        self._pairs[self._key_id(key)] = (key, value)

    def get(self, key: Any) -> V | None:
        pair = self._pairs.get(self._key_id(key))
        return None if pair is None else pair[1]

    def pop(self, key: Any) -> V | None:
        pair = self._pairs.pop(self._key_id(key), None)
        return None if pair is None else pair[1]

    def __contains__(self, key: Any) -> bool:
        return self._key_id(key) in self._pairs

    def __len__(self) -> int:
        return len(self._pairs)

    def items(self) -> Iterator[tuple[Any, V]]:
        return iter(list(self._pairs.values()))

    def clear(self) -> None:
        self._pairs.clear()
