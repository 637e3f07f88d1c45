"""Write a queue file with the ackqueue on ``PYTHONPATH``, to be opened later by newer code.

    PYTHONPATH=/path/to/old/tree python3 tests/make_old_file.py tests/data/NAME.fs

The file holds three named queues (``jobs``: an ``AckQueue`` with ``max_attempts=3``;
``urgent``: a ``PriorityAckQueue``; ``stack``: a ``LifoAckQueue``) with ready items, items
held by a consumer when the writing process is SIGKILLed, dead letters (by ``max_attempts``
and by ``reject``) and items delayed until a far-future time. ``EXPECTED`` below is what any
later ackqueue must find in it; ``tests/storage/test_old_files.py`` checks exactly that. The
committed file was written by the tree named in its name: change ``write`` and ``EXPECTED``
only together with a file regenerated on that tree.

A tree with puts by key (``AckQueue.seen`` exists) also writes ``crawl`` (:data:`CRAWL`): an
``AckQueue`` with ``unique="forever"`` and ``max_held_per_group=1`` holding items put by key
and by group, a key in its seen-set, a paused group and an item held at the kill.
``tests/data/written_by_6ff5410.fs`` has it (the main of 2026-11-26, before serializers and
format versions); ``written_by_26e4f63.fs`` does not.

Only the public API is used, so the script runs on any tree since the API took its shape.
Only the ``.fs`` file is kept: the index, lock, status and commit scratch files a killed
process leaves are removed, as a user copying a queue file would copy only the file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

# 2100-01-01 00:00 UTC: a delay that no test run will see fall due.
FAR_FUTURE = 4102444800.0
# ``nack(delay=)`` is relative to the writing moment; a billion seconds is past 2050.
NACK_DELAY = 1e9

# What the file holds, per queue: every stored item in delivery order once all are due, the
# delayed ones among them, the attempt count of each next delivery of the ready ones (the items
# held at the kill come first; with max_attempts their delivery was counted on disk), and the
# dead letters as (item, attempts, a word of the reason).
EXPECTED: dict[str, dict[str, Any]] = {
    "jobs": {
        "kind": "fifo",
        "options": {"max_attempts": 3},
        "order": ["first", "retry later", "j0", 5, 5, {"k": [1, 2]}, b"\x00b", "later"],
        "delayed": ["retry later", "later"],
        "ready_attempts": [2, 2, 2, 1, 1, 1],
        "dead": [("poison", 3, "max_attempts"), ("rejected", 1, "cannot parse")],
    },
    "urgent": {
        "kind": "priority",
        "options": {},
        "order": [(0, "delayed"), (0, "held"), (1, "a"), (1, "b"), (2, {"x": 1}), (3, "c")],
        "delayed": [(0, "delayed")],
        "ready_attempts": [1, 1, 1, 1, 1],
        "dead": [((9, "bad"), 1, "bad input")],
    },
    "stack": {
        "kind": "lifo",
        "options": {},
        "order": ["s3", "s2", "s1"],  # newest first; the held top item is back on top
        "delayed": [],
        "ready_attempts": [1, 1, 1],
        "dead": [],
    },
}

# The crawl queue, on trees with puts by key: its live items by key (None: put without one)
# and group, the key it remembers as done, the group paused past 2050, the item held at the
# kill, and what a consumer gets first once it is back (max_held_per_group=1, "b" paused).
CRAWL: dict[str, Any] = {
    "options": {"unique": "forever", "max_held_per_group": 1},
    "live": [("a1", "https://a/1", "a"), ("a2", "https://a/2", "a"),
             ("b1", "https://b/1", "b"), ("loose", None, None)],
    "seen": "https://x/done",
    "paused_group": "b",
    "held": "a1",
    "first_gets": {"a1", "loose"},
}


def write_crawl(path: str) -> None:
    import ackqueue

    crawl = ackqueue.AckQueue(path, name="crawl", **CRAWL["options"])
    c = crawl.connect()
    assert crawl.put("done page", key=CRAWL["seen"]) is True
    c.ack(c.get_nowait())  # done: its key stays in the seen-set forever
    for item, key, group in CRAWL["live"]:
        if key is None:
            crawl.put(item)
        else:
            assert crawl.put(item, key=key, group=group) is True
    crawl.pause_group(CRAWL["paused_group"], NACK_DELAY)
    assert c.get_nowait() == CRAWL["held"]


def write(path: str) -> None:
    """Fill ``path`` and SIGKILL this process while a consumer of each queue holds items."""
    import ackqueue

    jobs = ackqueue.AckQueue(path, name="jobs", max_attempts=3)
    urgent = ackqueue.PriorityAckQueue(path, name="urgent")
    stack = ackqueue.LifoAckQueue(path, name="stack")

    c = jobs.connect()
    jobs.put("acked")
    c.ack(c.get_nowait())  # gone for good: must not come back
    jobs.put("poison")
    for _ in range(3):
        c.nack(c.get_nowait())  # the third nack reaches max_attempts: a dead letter
    jobs.put("rejected")
    c.reject(c.get_nowait(), reason="cannot parse")
    jobs.put("retry later")
    c.nack(c.get_nowait(), delay=NACK_DELAY)
    jobs.put_many(["j0", 5, 5, {"k": [1, 2]}, b"\x00b"])
    jobs.put("first", priority=-1)
    jobs.put("later", not_before=FAR_FUTURE)
    held_jobs = [c.get_nowait() for _ in range(3)]
    assert held_jobs == ["first", "j0", 5], held_jobs

    u = urgent.connect()
    urgent.put((9, "bad"))
    u.reject(u.get_nowait(), reason="bad input")
    for item in [(3, "c"), (1, "b"), (2, {"x": 1}), (1, "a"), (0, "held")]:
        urgent.put(item)
    urgent.put((0, "delayed"), not_before=FAR_FUTURE)
    urgent.put((-1, "acked"))
    u.ack(u.get_nowait())
    assert u.get_nowait() == (0, "held")

    s = stack.connect()
    stack.put_many(["s1", "s2", "s3"])
    assert s.get_nowait() == "s3"

    if hasattr(ackqueue.AckQueue, "seen"):
        write_crawl(path)

    jobs.pack()  # keeps the file small: drops old revisions only, holds stay as they are
    sys.stdout.write("holding\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(path: str) -> None:
    for leftover in [path, *(path + ext for ext in (".index", ".lock", ".tmp", ".status"))]:
        if os.path.exists(leftover):
            os.remove(leftover)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", path], capture_output=True, text=True
    )
    if proc.returncode != -signal.SIGKILL or proc.stdout != "holding\n":
        raise SystemExit(f"the writer ended with {proc.returncode}: {proc.stdout}{proc.stderr}")
    for ext in (".index", ".lock", ".tmp", ".status"):
        if os.path.exists(path + ext):
            os.remove(path + ext)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        write(sys.argv[2])
    else:
        main(sys.argv[1])
