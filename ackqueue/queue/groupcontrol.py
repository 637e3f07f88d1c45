"""Acting on one group of items at once: pause it for a while, resume it, remove its items.

A pause is stored (the queue opens with it again, and in shared mode every process sees it);
in one process the grouped ready index takes the group out of the rotation until then. Removing
a group removes its waiting items (ready or delayed) in one commit; items of the group that
consumers hold stay held: their ack, nack or snooze works as usual (call again once they are
settled, or pause the group first, to be rid of them).
"""

from __future__ import annotations

from ackqueue.delivery.groups import GroupRules, check_named_group, checked_seconds
from ackqueue.queue.core import Core
from ackqueue.storage import groupbook


class GroupControl:
    def __init__(self, core: Core, rules: GroupRules) -> None:
        self._signals, self._life, self._tasks = core.signals, core.life, core.tasks
        self._book, self._supply, self._clock = core.book, core.supply, core.clock
        self._store = core.book.store
        self.rules = rules

    def pause(self, group: object, seconds: object) -> None:
        """No item of ``group`` is delivered for ``seconds`` from now (0 resumes it)."""
        name = check_named_group(group)
        span = checked_seconds("pause_group seconds", seconds)
        self._life.check_open()
        until = self._clock() + span if span else 0.0
        self._store.run(groupbook.group_pauser(self._book, name, until))
        with self._signals.mutex:
            self._supply.pause_group_locked(name, until)

    def remove(self, group: object) -> int:
        """Remove every waiting item of ``group`` (held ones stay held); return how many."""
        name = check_named_group(group)
        self._life.check_open()
        supply = self._supply
        with self._signals.mutex:
            taken = supply.take_group_locked(name)
        if taken is None:  # the ready index reads the store: remove what no process holds
            return int(self._store.run(groupbook.group_remover(self._book, name)))
        if not taken:
            return 0
        keys = [key for key, _due in taken]
        try:
            self._store.run(self._book.deleter(keys))
        except BaseException:
            with self._signals.mutex:
                for key, due in taken:
                    supply.land_locked(key, due)
            raise
        with self._signals.mutex:
            for key in keys:
                supply.gone_locked(key)
            self._tasks.finished_locked(len(keys))
            self._signals.not_full.notify(len(keys))
        return len(keys)
