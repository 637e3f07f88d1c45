"""Group rules across processes: which groups may deliver, read from the store.

In shared mode every process's holds are stored (:mod:`ackqueue.shared.holdmarks`), so how many
items of a group are held is counted there, never in one process's memory. A take of a grouped
entry checks the rules inside its own commit and writes the group's *turn* (the time of its
last delivery, ``record.group_turns``): two processes taking items of one group at once both
change that one value, so ZODB makes the later commit conflict and retry, and the retry sees
the other's hold. Takes of different groups change different keys, which BTrees merge. The
ready scan skips groups the rules stop, so that gets do not keep racing for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ackqueue.delivery.groups import GroupRules
from ackqueue.records import QueueRecord, edge_loaded
from ackqueue.shared.holdmarks import HOLDS_KEY, entry_of, holds_of_queue


def held_by_group(root: Any, name: str) -> Counter[str | None]:
    """How many entries of each group of queue ``name`` are held, in every process (None:
    those put without a group)."""
    held: Counter[str | None] = Counter()
    ranges = holds_of_queue(root.get(HOLDS_KEY), name)
    for key in {key for keys in ranges for _, key in keys}:
        entry = entry_of(root, name, key)
        if entry is not None:
            held[getattr(entry, "group", None)] += 1
    return held


class GroupGate:
    """The group rules of one shared queue, applied to its stored state."""

    def __init__(self, rules: GroupRules, name: str) -> None:
        self.rules = rules
        self._name = name

    def stopped(self, record: QueueRecord, root: Any, now: float) -> set[str | None]:
        """The groups that may not deliver now (paused, in their interval, or at the cap;
        None: the items put without a group, which form one group under the same rules)."""
        rules = self.rules
        if not record.grouped and rules.max_held is None and not rules.interval:
            return set()
        stopped: set[str | None] = {
            g for g, until in edge_loaded(record.group_pauses or {}).items() if until > now
        }
        settings = record.group_settings or {}
        turns = edge_loaded(record.group_turns or {})
        stopped.update(
            g for g, last in turns.items() if now < last + self.rules.limits(g, settings)[1]
        )
        if rules.interval and now < record.turn(None) + rules.interval:
            stopped.add(None)
        if self.rules.max_held is not None or settings:
            held = held_by_group(root, self._name)
            stopped.update(
                g for g, n in held.items()
                if (cap := self.rules.limits(g, settings)[0]) is not None and n >= cap
            )
        return stopped

    def admitter(self, record: QueueRecord, root: Any, now: float) -> Callable[[Any], bool]:
        """For one take's commit: ``admit(entry)``, whether ``entry`` may be delivered now
        (entries admitted earlier in the commit count as held)."""
        taking: Counter[str | None] = Counter()

        def admit(entry: Any) -> bool:
            return self._admit(record, root, entry, now, taking)

        return admit

    def _admit(
        self, record: QueueRecord, root: Any, entry: Any, now: float,
        taking: Counter[str | None],
    ) -> bool:
        """Whether ``entry`` may be delivered now; if so its group's turn is written (see the
        module docstring). Items put without a group are one group (None) under the same
        rules: only the queue's options, as no call names that group."""
        group = getattr(entry, "group", None)
        if group is not None:
            # Read as current: a pause another process commits before this take conflicts
            # with it, which then looks again (no delivery after that pause_group returned).
            until = record.paused_until(group, current=True)
            if until is not None and until > now:
                return False
        # Another process's set_group is read here, inside the take's commit.
        max_held, interval = self.rules.limits(group, record.group_settings or {})
        if max_held is None and not interval:
            return True
        if interval and now < record.turn(group) + interval:
            return False
        if max_held is not None:
            held = held_by_group(root, self._name)[group] + taking[group]
            if held >= max_held:
                return False
        record.set_turn(group, now)
        taking[group] += 1
        return True
