"""When the ready index of a queue in one process must know groups, and how it is made then.

A queue with group rules, or whose file holds grouped entries, opens with a
:class:`~ackqueue.delivery.grouped.GroupedReadyIndex`: every grouped entry is read once at open
(its group is not in its key), and the ungrouped ones stay in the plain index's lazy backlog. A
queue opened without either switches on its first grouped put, keeping its plain index as the
lane of ungrouped keys. Shared mode reads groups from the stored tree instead (no Grouping).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ackqueue.base.clock import Clock
from ackqueue.delivery.grouped import GroupedReadyIndex, KeyId, Schedule
from ackqueue.delivery.groups import GroupRules
from ackqueue.delivery.ready import Key, ReadyKeys, ScanAfter
from ackqueue.storage import groupbook
from ackqueue.storage.book import Book


@dataclass(frozen=True)
class Grouping:
    rules: GroupRules
    key_id: KeyId
    clock: Clock

    def wanted(self, book: Book) -> bool:
        return self.rules.limited or groupbook.has_groups(book)

    def open_index(
        self, book: Book, backlog: int, scan_after: ScanAfter, new_plain: Any, schedule: Schedule
    ) -> GroupedReadyIndex:
        """The index at open: ``backlog`` stored keys are ready (0 after a drain: none)."""
        key_id = self.key_id
        entries = groupbook.grouped_entries(book)
        group_of = {key_id(key): group for key, group, _delayed in entries}
        ready = [key for key, _group, delayed in entries if not delayed] if backlog > 0 else []

        def ungrouped_after(cursor: Any) -> list[Key]:
            while True:
                keys = scan_after(cursor)
                if not keys:
                    return []
                mine = [key for key in keys if key_id(key) not in group_of]
                if mine:
                    return mine
                cursor = keys[-1]

        plain: ReadyKeys = new_plain(max(0, backlog - len(ready)), ungrouped_after)
        index = GroupedReadyIndex(
            plain, self.rules, self.clock, key_id, schedule, group_of, groupbook.group_pauses(book)
        )
        for key in ready:
            index.offer(key)
        return index

    def around(self, plain: ReadyKeys, schedule: Schedule) -> GroupedReadyIndex:
        """A grouped index whose ungrouped lane is the plain index the queue had so far."""
        return GroupedReadyIndex(plain, self.rules, self.clock, self.key_id, schedule)
