"""Groups across processes (``shared=True``): the per-group cap counts every process's holds,
and a process killed while holding items of several groups loses none of them.

The cap is checked by the workers themselves while they run: a worker creates a marker file
named after the group of the item it got (``O_CREAT | O_EXCL``, atomic across processes) and
removes it before its ack, so a second item of one group held anywhere at the same time finds
the marker and says so.
"""

from __future__ import annotations

import signal
import time

import pytest
from conftest import spawn_child
from polling import bounded

import ackqueue

GROUPS, PER_GROUP = 4, 6

WORKER = """
import os, sys, threading, time
import ackqueue
path, marks = sys.argv[1], sys.argv[2]
q = ackqueue.AckQueue(path, shared=True, max_held_per_group=1, session_timeout=5)
lock = threading.Lock()
print("ready", flush=True)
sys.stdin.readline()  # every worker starts at once

def work():
    with q.connect() as c:
        while True:
            try:
                item = c.get(timeout=3)
            except ackqueue.Empty:
                return
            mark = os.path.join(marks, item[0])
            try:
                fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                with lock:
                    print("TWO HELD", item, flush=True)
                c.ack(item)
                continue
            os.close(fd)
            time.sleep(0.02)  # work while it is held
            os.remove(mark)
            c.ack(item)
            with lock:
                print("acked", repr(item), flush=True)

threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
q.close()
"""

HOLDER = """
import sys
import ackqueue
q = ackqueue.AckQueue(sys.argv[1], shared=True, max_held_per_group=1, session_timeout=1)
c = q.connect()
while True:
    try:
        item = c.get(timeout=1)
    except ackqueue.Empty:
        break
    print("held", repr(item), flush=True)
print("done", flush=True)
sys.stdin.read()  # hold until killed
"""


def fill(q: ackqueue.AckQueue) -> set[tuple[str, int]]:
    items = set()
    for g in range(GROUPS):
        batch = [(f"g{g}", i) for i in range(PER_GROUP)]
        q.put_many(batch, group=f"g{g}")
        items.update(batch)
    return items


def test_max_held_per_group_holds_across_processes(tmp_path) -> None:
    path, marks = str(tmp_path / "q.fs"), tmp_path / "marks"
    marks.mkdir()
    with ackqueue.AckQueue(path, shared=True, max_held_per_group=1) as q:
        items = fill(q)
        workers = [spawn_child(WORKER, path, str(marks)) for _ in range(3)]
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().startswith("ready")
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        outputs = []
        for w in workers:
            out, _ = w.communicate(timeout=240)
            assert w.returncode == 0
            outputs.append(out)
        lines = "".join(outputs).splitlines()
        assert not [line for line in lines if line.startswith("TWO HELD")]
        acked = [eval(line.split(" ", 1)[1]) for line in lines if line.startswith("acked")]
        assert sorted(acked) == sorted(items)  # each exactly once
        assert q.qsize() == 0 and q.unacked_count() == 0
        assert sum(1 for out in outputs if "acked" in out) >= 2  # the work was shared


def test_a_killed_holder_loses_nothing_and_the_cap_holds_after(tmp_path) -> None:
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, shared=True, max_held_per_group=1, session_timeout=1) as q:
        items = fill(q)
        holder = spawn_child(HOLDER, path)
        try:
            assert holder.stdout is not None
            held = []
            for _ in bounded(GROUPS + 1, "the holder's lines"):
                line = holder.stdout.readline()
                if line.startswith("done"):
                    break
                held.append(eval(line.split(" ", 1)[1]))
            # The holder got one item of each group, no more: the cap across processes.
            assert sorted(g for g, _i in held) == [f"g{g}" for g in range(GROUPS)]
            with q.connect() as c:
                try:
                    extra = c.get(timeout=0.5)
                except ackqueue.Empty:
                    extra = None
                assert extra is None, f"{extra} of a group another process holds"
            holder.send_signal(signal.SIGKILL)  # after it logged its holds
            holder.wait(30)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait(30)
        got: list[tuple[str, int]] = []
        with q.connect() as c:
            deadline = time.monotonic() + 60
            while len(got) < len(items):
                assert time.monotonic() < deadline, f"only {len(got)} of {len(items)} came back"
                out = [c.get(timeout=10)]
                try:
                    for _ in bounded(100_000, "taking what is ready"):
                        out.append(c.get(block=False))
                except ackqueue.Empty:
                    pass
                # At most one of each group at once, the killed process's holds included.
                groups = [g for g, _i in out]
                assert len(groups) == len(set(groups)), groups
                for item in out:
                    c.ack(item)
                got += out
        assert sorted(got) == sorted(items)


def test_a_killed_process_in_one_process_mode_gives_every_group_back(tmp_path) -> None:
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        items = fill(q)
    code = HOLDER.replace("shared=True, ", "")
    holder = spawn_child(code, path)
    try:
        assert holder.stdout is not None
        for _ in range(GROUPS):
            assert holder.stdout.readline().startswith("held")
        assert holder.stdout.readline().startswith("done")
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
    with ackqueue.AckQueue(path, max_held_per_group=1) as q, q.connect() as c:
        first = []
        try:
            for _ in bounded(100_000, "taking what is ready"):
                first.append(c.get(block=False))
        except ackqueue.Empty:
            pass
        assert sorted(g for g, _i in first) == [f"g{g}" for g in range(GROUPS)]
        assert [i for _g, i in first] == [0] * GROUPS  # back in their places
        got = list(first)
        for item in first:
            c.ack(item)
        for _ in bounded(len(items), "draining"):
            try:
                item = c.get(block=False)
            except ackqueue.Empty:
                break
            got.append(item)
            c.ack(item)
        assert sorted(got) == sorted(items)


SETTER = """
import sys
import ackqueue
q = ackqueue.AckQueue(sys.argv[1], shared=True, max_held_per_group=1)
q.set_group("a", max_held=3)
q.close()
print("set", flush=True)
"""


def test_set_group_in_one_process_holds_in_another(tmp_path) -> None:
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path, shared=True, max_held_per_group=1) as q:
        q.put_many(["a1", "a2", "a3"], group="a")
        with q.connect() as c:
            first = c.get_nowait()
            try:
                c.get_nowait()
                raise AssertionError("the queue's cap let a second item of 'a' out")
            except ackqueue.Empty:
                pass
            setter = spawn_child(SETTER, path)
            out, _ = setter.communicate(timeout=120)
            assert setter.returncode == 0 and "set" in out
            # Read from the store inside this process's take: the other process's setting.
            more = [c.get(timeout=10), c.get(timeout=10)]
            assert sorted([first, *more]) == ["a1", "a2", "a3"]
            c.ack_many([first, *more])


def test_maxsize_counts_the_items_of_paused_and_capped_groups_in_shared_mode(qpath):
    """As in one process (tests/queue/test_full_and_empty.py): items that wait because their
    group is paused or at its cap take their places. The shared ready index said 0 once only
    such items were left, so ``full()`` said False and ``put_nowait`` went past ``maxsize``."""
    with ackqueue.AckQueue(qpath, shared=True, maxsize=2, max_held_per_group=1) as q:
        q.pause_group("b", 3600)
        q.put("b1", group="b")
        q.put("b2", group="b")
        assert q.full(), "two items of a paused group fill maxsize 2"
        with pytest.raises(ackqueue.Full):
            q.put_nowait("x")
        q.pause_group("b", 0)
        with q.connect() as c:
            held = c.get(timeout=5)
            assert held == "b1"  # b2 now waits for b's cap
            with pytest.raises(ackqueue.Empty):
                c.get_nowait()
            assert not q.full()  # b1 is held: its place is free
            q.put_nowait("a1", group="a")
            assert q.full(), "b2 (its group at its cap) and a1 fill maxsize 2"
            with pytest.raises(ackqueue.Full):
                q.put_nowait("y")
            c.ack(held)
