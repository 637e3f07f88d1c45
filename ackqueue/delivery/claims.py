"""Small records that travel between the queue's hooks on their way to a caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class GetAgain(Exception):
    """Nothing could be claimed after all (every staged put that a get waited for failed, or
    another process took the item first): wait again for a real item."""


@dataclass
class Claim:
    """An item taken out of the ready index, on its way to a caller."""

    key: Any
    item: Any
    attempts: int
    delivery_id: int | None = None  # chosen before the hold is stored (shared mode)
