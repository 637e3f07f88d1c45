"""The ready keys of a queue whose items have groups, in one process: one lane per group, and a
rotation of the groups that may deliver now.

Each group has its own lane, a :class:`~ackqueue.delivery.ready.ReadyIndex` (so within a group
the queue's own order holds: FIFO, LIFO or the items' priority). The lane of items put without
a group is the queue's plain index, with its lazy backlog. A group is in the *rotation* while
its lane has keys and it may deliver: fewer than ``max_held`` of its keys are out (popped and
neither back nor settled), its ``interval`` since its last delivery has passed, and it is not
paused. :meth:`pop` takes the head of the first group in the rotation and moves that group to
the back, so gets go round-robin across groups and a group with a million items delivers once
per turn like any other. A group that may deliver again later is woken by a timer.

``len`` is what may be delivered now: keys of a group that is waiting count like delayed keys.
Every method runs with the queue's mutex held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ackqueue.base.clock import Clock
from ackqueue.delivery.groups import Group, GroupRules
from ackqueue.delivery.ready import Key, ReadyIndex, ReadyKeys

# ``schedule(when, wake)``: call ``wake()`` (mutex held) once the clock reaches ``when``; if it
# returns True, a group became ready and waiting gets must be told.
Schedule = Callable[[float, Callable[[], bool]], None]
KeyId = Callable[[Any], Any]

_NOT_OUT = "\0not out"  # no group is named so by put (a str sentinel keeps the types simple)


def _no_scan(_cursor: Any) -> list[Key]:
    return []


class GroupedReadyIndex:
    def __init__(
        self,
        ungrouped: ReadyKeys,
        rules: GroupRules,
        clock: Clock,
        key_id: KeyId,
        schedule: Schedule,
        group_of: dict[Any, str] | None = None,
        pauses: dict[str, float] | None = None,
    ) -> None:
        """``ungrouped``: the lane of keys without a group; ``group_of``: the group of every
        live grouped key by its id (ready, delayed or held); ``pauses``: group -> paused until."""
        self.rules = rules
        self._clock = clock
        self._key_id = key_id
        self._schedule = schedule
        self._lanes: dict[Group, ReadyKeys] = {None: ungrouped}
        self._group_of: dict[Any, str] = group_of if group_of is not None else {}
        self._out: dict[Any, Group] = {}  # key id -> group, for keys popped and not back
        self._held: dict[Group, int] = {}
        self._next_at: dict[Group, float] = {}  # the interval's end after the last delivery
        self._paused: dict[Group, float] = {g: until for g, until in (pauses or {}).items()}
        self._rotation: deque[Group] = deque()
        self._counted: dict[Group, int] = {}  # groups in the rotation -> keys counted in len
        self._ready_now = 0
        self._in_grouped_lanes = 0
        self._waking: dict[Group, float] = {}
        self._reconsider(None)

    # -- ReadyKeys -----------------------------------------------------------------------

    @property
    def cursor(self) -> Any:
        return self._lanes[None].cursor  # backlog read-ahead is for the ungrouped lane only

    def __len__(self) -> int:
        return self._ready_now

    def push(self, key: Key) -> None:
        """``key`` is ready again (given back, or a claim that failed), or for the first time."""
        key_id = self._key_id(key)
        group: Group = self._out.pop(key_id, _NOT_OUT)
        if group == _NOT_OUT:
            group = self._group_of.get(key_id)
        else:
            self._unhold(group)
        self._lane(group).push(key)
        if group is not None:
            self._in_grouped_lanes += 1
        if group in self._counted:
            self._counted[group] += 1
            self._ready_now += 1
        else:
            self._reconsider(group)

    def offer(self, key: Key) -> None:
        self.push(key)

    def total(self) -> int:
        """Ready keys in every lane, also of groups that may not deliver now."""
        return len(self._lanes[None]) + self._in_grouped_lanes

    def peek(self) -> Key:
        while self._rotation:
            group = self._rotation[0]
            try:
                return self._lanes[group].peek()
            except IndexError:  # the ungrouped lane's backlog was counted wrong at open
                self._leave_rotation()
        raise IndexError("no group may deliver now")

    def pop(self) -> Key:
        self.peek()  # drops groups whose lane turned out empty
        group = self._leave_rotation()
        lane = self._lanes[group]
        key = lane.pop()
        if group is not None:
            self._in_grouped_lanes -= 1
        self._out[self._key_id(key)] = group
        self._held[group] = self._held.get(group, 0) + 1
        if self.rules.interval:
            self._next_at[group] = self._clock() + self.rules.interval
        if group is not None and not len(lane):
            del self._lanes[group]  # lanes of drained groups are made again when needed
        else:
            self._reconsider(group)
        return key

    def release(self, key: Key) -> bool:
        """A popped key is out no longer (settled, delayed, voided) without being ready here;
        True if its group may deliver now because of that."""
        group = self._out.pop(self._key_id(key), _NOT_OUT)
        if group == _NOT_OUT:
            return False
        self._unhold(group)
        return self._reconsider(group)

    def forget(self, key: Key) -> bool:
        """``key`` left the queue for good (acked, buried, removed)."""
        woke = self.release(key)
        self._group_of.pop(self._key_id(key), None)
        return woke

    # -- groups ----------------------------------------------------------------------------

    def assign(self, key: Key, group: Group) -> None:
        """A new key's group, before it is offered (None: no group)."""
        if group is not None:
            self._group_of[self._key_id(key)] = group

    def group_of(self, key: Key) -> Group:
        return self._group_of.get(self._key_id(key))

    def pause(self, group: Group, until: float) -> bool:
        """No delivery of ``group`` before ``until`` (a time in the past resumes it); True if
        it may deliver now."""
        if until > self._clock():
            self._paused[group] = until
            if group in self._counted:
                self._rotation.remove(group)
                self._ready_now -= self._counted.pop(group)
            self._reconsider(group)
            return False
        self._paused.pop(group, None)
        return self._reconsider(group)

    def discard(self, key: Key) -> bool:
        """Take a ready key out of its lane (removing one item); True if it was there."""
        group = self._group_of.get(self._key_id(key))
        lane = self._lanes.get(group)
        if not isinstance(lane, ReadyIndex) or not lane.discard(key):
            return False
        self._taken_out(group)
        return True

    def withdraw(self, key: Key, backlog: bool) -> bool:
        """As :meth:`ReadyIndex.withdraw`: a ready key taken out (a remove, or a revisit of a
        put by key); keys without a group may still be in the ungrouped lane's backlog."""
        group = self._group_of.get(self._key_id(key))
        if group is not None:
            return self.discard(key)
        if not self._lanes[None].withdraw(key, backlog):
            return False
        self._taken_out(None)
        return True

    def _taken_out(self, group: Group) -> None:
        if group is not None:
            self._in_grouped_lanes -= 1
        if group in self._counted:
            self._counted[group] -= 1
            self._ready_now -= 1
            if not self._counted[group]:
                self._rotation.remove(group)
                del self._counted[group]

    def take_lane(self, group: Group) -> list[Key]:
        """Take every ready key of ``group`` out (to remove them); :meth:`push` puts one back."""
        lane = self._lanes.pop(group, None)
        if group in self._counted:
            self._rotation.remove(group)
            self._ready_now -= self._counted.pop(group)
        taken: list[Key] = []
        while lane is not None and len(lane):
            taken.append(lane.pop())
        if group is None:
            self._lanes[None] = ReadyIndex(0, _no_scan)
        else:
            self._in_grouped_lanes -= len(taken)
        return taken

    # -- the rotation ------------------------------------------------------------------------

    def _lane(self, group: Group) -> ReadyKeys:
        lane = self._lanes.get(group)
        if lane is None:
            lane = self._lanes[group] = ReadyIndex(0, _no_scan)
        return lane

    def _unhold(self, group: Group) -> None:
        held = self._held[group] - 1
        if held:
            self._held[group] = held
        else:
            del self._held[group]

    def _leave_rotation(self) -> Group:
        group = self._rotation.popleft()
        self._ready_now -= self._counted.pop(group)
        return group

    def _due(self, group: Group, now: float) -> float:
        """When ``group`` may deliver again as far as time goes (0: now)."""
        due = max(self._next_at.get(group, 0.0), self._paused.get(group, 0.0))
        if due and due <= now:
            self._next_at.pop(group, None)
            self._paused.pop(group, None)
            return 0.0
        return due

    def _reconsider(self, group: Group) -> bool:
        """Put ``group`` in the rotation if it may deliver now; True if it was put there."""
        if group in self._counted:
            return False
        lane = self._lanes.get(group)
        if lane is None or not len(lane):
            return False
        if self.rules.at_cap(self._held.get(group, 0)):
            return False  # a release brings it back
        due = self._due(group, self._clock())
        if due:
            self._wake_at(group, due)
            return False
        self._rotation.append(group)
        self._counted[group] = len(lane)
        self._ready_now += len(lane)
        return True

    def _wake_at(self, group: Group, when: float) -> None:
        if self._waking.get(group, float("inf")) <= when:
            return

        def wake() -> bool:
            if self._waking.get(group) == when:
                del self._waking[group]
            return self._reconsider(group)

        self._waking[group] = when
        self._schedule(when, wake)
