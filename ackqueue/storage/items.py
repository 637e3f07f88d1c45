"""How an item is stored: its pickle, and a put on its way to the book (:class:`Staged`).

A pickle that cannot be made is an :class:`~ackqueue.UnpicklableItemError` at ``put`` (nothing
is stored); one that cannot be loaded any more (its class is gone) is an
:class:`~ackqueue.ItemLoadError` that names the missing class.
"""

from __future__ import annotations

import contextlib
import io
import pickle
from dataclasses import dataclass
from typing import Any

from ackqueue.errors import ItemLoadError, UnpicklableItemError


@dataclass
class Staged:
    """A put whose item is pickled and keyed, not yet committed."""

    key: Any
    seq: int
    data: bytes
    not_before: float = 0.0
    group: str | None = None


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
        raise ItemLoadError(f"cannot load {what}: {_describe(data, exc)}") from exc


class _NamingUnpickler(pickle.Unpickler):
    """Remembers the class it failed to find, to name it in the error."""

    missing: str | None = None

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception:
            self.missing = f"{module}.{name}"
            raise


def _describe(data: bytes, exc: Exception) -> str:
    """Name the missing class, which is what a user needs to fix it."""
    unpickler = _NamingUnpickler(io.BytesIO(data))
    with contextlib.suppress(Exception):
        unpickler.load()
    if unpickler.missing:
        return f"class {unpickler.missing} cannot be found ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"
