"""Groups of items (``put(item, group=g)``: a host name, say): their rules, and the ready index
that applies them in one process.

``max_held_per_group`` caps how many items of one group are out at once (claimed or held, by
every consumer); ``group_interval`` is the least time between two deliveries of one group. Gets
go round-robin across the groups that may deliver now. Items put without a group form one
group of their own (``None``), under the same rules. The rules are checked here, once, so that
bad input is refused before anything is stored (:class:`GroupRules`).

In one process the :class:`GroupedReadyIndex` applies them: each group has its own lane, a
:class:`~ackqueue.delivery.ready.ReadyIndex` (so within a group the queue's own order holds:
FIFO, LIFO or the items' priority). The lane of items put without a group is the queue's plain
index, with its lazy backlog. A group is in the *rotation* while its lane has keys and it may
deliver: fewer than ``max_held`` of its keys are out (popped and neither back nor settled), its
``interval`` since its last delivery has passed, and it is not paused. :meth:`pop` takes the
head of the first group in the rotation and moves that group to the back, so gets go
round-robin across groups and a group with a million items delivers once per turn like any
other. A group that may deliver again later is woken by a timer. ``len`` is what may be
delivered now: keys of a group that is waiting count like delayed keys. Every method runs with
the queue's mutex held.

How a queue's ready index is made is its mode's :class:`Indexing`. In one process that is a
:class:`Grouping`: a queue with group rules, or whose file holds grouped entries, opens with a
grouped index (every grouped entry is read once at open, since its group is not in its key,
and the ungrouped ones stay in the plain lane's lazy backlog); a queue opened without either
switches on its first grouped put, keeping its plain index as the lane of ungrouped keys.
Shared mode reads groups from the stored tree instead.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ackqueue.base.clock import Clock, durations_clock
from ackqueue.delivery.ready import Key, ReadyIndex, ReadyKeys, ScanAfter
from ackqueue.storage.book import Book, group_pauses, grouped_entries, has_groups

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
        # Intervals and pauses run as durations (see ackqueue.base.clock): a pause's stored
        # wall-clock end is turned into a monotonic one when it is learnt.
        self._monotonic = durations_clock(clock)
        self._key_id = key_id
        self._schedule = schedule
        self._lanes: dict[Group, ReadyKeys] = {None: ungrouped}
        self._group_of: dict[Any, str] = group_of if group_of is not None else {}
        self._out: dict[Any, Group] = {}  # key id -> group, for keys popped and not back
        self._held: dict[Group, int] = {}
        self._last_at: dict[Group, float] = {}  # the last delivery of groups with an interval
        self._paused: dict[Group, float] = {
            g: self._monotonic_end(until) for g, until in (pauses or {}).items()
        }
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
        if self.rules.limits(group)[1]:
            self._last_at[group] = self._monotonic()
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
            self._paused[group] = self._monotonic_end(until)
            if group in self._counted:
                self._rotation.remove(group)
                self._ready_now -= self._counted.pop(group)
            self._reconsider(group)
            return False
        self._paused.pop(group, None)
        return self._reconsider(group)

    def changed(self, group: str) -> bool:
        """``group``'s own settings changed (:attr:`GroupRules.own`); True if it may deliver
        now because of that."""
        if group in self._counted and (
            self.rules.group_at_cap(group, self._held.get(group, 0))
            or self._due(group, self._monotonic())
        ):
            self._rotation.remove(group)
            self._ready_now -= self._counted.pop(group)
        return self._reconsider(group)

    def _monotonic_end(self, until: float) -> float:
        return self._monotonic() + (until - self._clock())

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
        last = self._last_at.get(group)
        spaced = 0.0 if last is None else last + self.rules.limits(group)[1]
        due = max(spaced, self._paused.get(group, 0.0))
        if due and due <= now:
            # The last delivery is kept: an interval lengthened later is measured from it,
            # as shared mode measures from the stored one (one float per group).
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
        if self.rules.group_at_cap(group, self._held.get(group, 0)):
            return False  # a release brings it back
        due = self._due(group, self._monotonic())
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


Group = str | None


# A group's own settings (``q.set_group``): max_held and interval, None for the queue's option.
GroupSetting = tuple[int | None, float | None]


@dataclass(frozen=True)
class GroupRules:
    """A queue's group options (``max_held`` None: no cap; ``interval`` 0: no spacing), and
    the settings of single groups that :meth:`AckQueue.set_group` gave (``own``: group ->
    ``(max_held, interval)``, None for the queue's option), kept in step with the stored ones."""

    max_held: int | None = None
    interval: float = 0.0
    own: dict[str, GroupSetting] = field(default_factory=dict, compare=False)

    @property
    def limited(self) -> bool:
        return self.max_held is not None or self.interval > 0 or bool(self.own)

    def at_cap(self, held: int) -> bool:
        return self.max_held is not None and held >= self.max_held

    def limits(
        self, group: Group, settings: Mapping[str, GroupSetting] | None = None
    ) -> tuple[int | None, float]:
        """``(max_held, interval)`` of ``group``: its own settings (from ``settings``, the
        stored ones in shared mode, else :attr:`own`) over the queue's options."""
        if group is None:
            return self.max_held, self.interval
        found = (self.own if settings is None else settings).get(group)
        if found is None:
            return self.max_held, self.interval
        max_held, interval = found
        return (
            self.max_held if max_held is None else max_held,
            self.interval if interval is None else interval,
        )

    def group_at_cap(self, group: Group, held: int) -> bool:
        max_held = self.limits(group)[0]
        return max_held is not None and held >= max_held


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


class Indexing(Protocol):
    """How a queue's mode makes its ready index, and whether that index learns groups in
    memory (one process) or reads them from the stored tree (shared mode)."""

    def open_index(
        self, book: Book, backlog: int, scan_after: ScanAfter, schedule: Schedule
    ) -> tuple[ReadyKeys, GroupedReadyIndex | None]:
        """The ready index at open (``backlog`` stored keys ready, 0 after a drain: none), and
        the same index if it knows groups (else None)."""
        ...

    def group_index(self, plain: ReadyKeys, schedule: Schedule) -> GroupedReadyIndex | None:
        """A grouped index around ``plain`` for a first grouped key, or None: the ready index
        learns no groups in memory."""
        ...


@dataclass(frozen=True)
class Grouping:
    """The indexing of a queue in one process: a queue with group rules, or whose file holds
    grouped entries, opens with a :class:`GroupedReadyIndex`; one opened without either
    switches on its first grouped put, keeping its plain index as the lane of ungrouped keys."""

    rules: GroupRules
    key_id: KeyId
    clock: Clock

    def wanted(self, book: Book) -> bool:
        return self.rules.limited or has_groups(book)

    def open_index(
        self, book: Book, backlog: int, scan_after: ScanAfter, schedule: Schedule
    ) -> tuple[ReadyKeys, GroupedReadyIndex | None]:
        if not self.wanted(book):
            return ReadyIndex(backlog=backlog, scan_after=scan_after), None
        index = self._grouped_at_open(book, backlog, scan_after, schedule)
        return index, index

    def _grouped_at_open(
        self, book: Book, backlog: int, scan_after: ScanAfter, schedule: Schedule
    ) -> GroupedReadyIndex:
        """Every grouped entry is read once at open (its group is not in its key); the
        ungrouped ones stay in the plain lane's lazy backlog."""
        key_id = self.key_id
        entries = grouped_entries(book)
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

        plain = ReadyIndex(backlog=max(0, backlog - len(ready)), scan_after=ungrouped_after)
        index = GroupedReadyIndex(
            plain, self.rules, self.clock, key_id, schedule, group_of, group_pauses(book)
        )
        for key in ready:
            index.offer(key)
        return index

    def group_index(self, plain: ReadyKeys, schedule: Schedule) -> GroupedReadyIndex:
        """A grouped index whose ungrouped lane is the plain index the queue had so far."""
        return GroupedReadyIndex(plain, self.rules, self.clock, self.key_id, schedule)
