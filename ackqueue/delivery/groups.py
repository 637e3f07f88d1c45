"""Groups of items (``put(item, group=g)``: a host name, say): the rules a queue applies to them.

``max_held_per_group`` caps how many items of one group are out at once (claimed or held, by
every consumer); ``group_interval`` is the least time between two deliveries of one group. Gets
go round-robin across the groups that may deliver now. Items put without a group form one
group of their own (``None``), under the same rules. The rules are checked here, once, so that
bad input is refused before anything is stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Group = str | None


@dataclass(frozen=True)
class GroupRules:
    """A queue's group options (``max_held`` None: no cap; ``interval`` 0: no spacing)."""

    max_held: int | None = None
    interval: float = 0.0

    @property
    def limited(self) -> bool:
        return self.max_held is not None or self.interval > 0

    def at_cap(self, held: int) -> bool:
        return self.max_held is not None and held >= self.max_held


def group_rules(max_held_per_group: object, group_interval: object) -> GroupRules:
    """The checked rules (ValueError/TypeError saying what is wrong and what to give)."""
    max_held: int | None = None
    if max_held_per_group is not None:
        if not isinstance(max_held_per_group, int) or isinstance(max_held_per_group, bool):
            raise TypeError(
                f"max_held_per_group must be a positive int or None, not "
                f"{type(max_held_per_group).__name__} {max_held_per_group!r}"
            )
        if max_held_per_group < 1:
            raise ValueError(
                f"max_held_per_group must be at least 1 (or None for no cap), not "
                f"{max_held_per_group!r}"
            )
        max_held = max_held_per_group
    return GroupRules(max_held, checked_seconds("group_interval", group_interval))


def checked_seconds(what: str, seconds: object) -> float:
    """``seconds`` as a float >= 0 (None counts as 0), or a clear error naming ``what``."""
    if seconds is None:
        return 0.0
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise TypeError(
            f"{what} must be a number of seconds, not {type(seconds).__name__} {seconds!r}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {seconds!r}")
    return float(seconds)


def check_group(group: object) -> None:
    """A group is a str (a host name, a tenant id), or None for no group."""
    if group is not None and not isinstance(group, str):
        raise TypeError(
            f"group must be a str (a host name, say) or None, not "
            f"{type(group).__name__} {group!r}; convert it with str() if that is what you mean"
        )


def check_named_group(group: object) -> str:
    """A group named by a call that acts on one group (pause, remove): a str."""
    if not isinstance(group, str):
        raise TypeError(
            f"name the group as the str given to put(group=), not "
            f"{type(group).__name__} {group!r}"
        )
    return group
