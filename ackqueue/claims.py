"""Small records that travel between the queue's hooks, and item (un)pickling."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from .errors import ItemLoadError, UnpicklableItemError


class Retry(Exception):
    """Every staged put that ``_get`` waited for failed: wait again for a real item."""


@dataclass
class Staged:
    """A put whose item is pickled and keyed, not yet committed."""

    key: Any
    seq: int
    data: bytes
    not_before: float = 0.0


@dataclass
class Claim:
    """An item taken out of the ready index, on its way to a caller."""

    key: Any
    item: Any
    attempts: int


def pickle_item(item: Any) -> bytes:
    try:
        return pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise UnpicklableItemError(
            f"cannot store an item of type {type(item).__qualname__}: it cannot be pickled ({exc})"
        ) from exc


def unpickle_item(data: bytes, what: str) -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise ItemLoadError(f"cannot load {what}: {_describe(exc)}") from exc


def _describe(exc: Exception) -> str:
    """Name the missing class or module, which is what a user needs to fix it."""
    if isinstance(exc, ModuleNotFoundError):
        return f"its module {exc.name!r} cannot be imported"
    if isinstance(exc, AttributeError) and "Can't get attribute" in str(exc):
        return f"its class is gone ({exc})"
    return f"{type(exc).__name__}: {exc}"
