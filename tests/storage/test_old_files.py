"""A queue file written by an older ackqueue opens under this one with everything in it.

``tests/data/written_by_26e4f63.fs`` was written by ``tests/make_old_file.py`` running on
commit 26e4f63 (before the code moved into layer folders), ``written_by_6ff5410.fs`` on the
main of 2026-11-26 (before serializers and format versions; it adds a queue with keys, a
seen-set and groups), ``written_by_924d115.fs`` on its main of the afternoon (format 2: every
entry a record of its own, before inline entries), each SIGKILLed while consumers held items.
The persistent classes' module paths are the file format: these tests fail if a move or rename
makes an old file unreadable, or changes what it means. Each test works on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from conftest import TESTS_DIR, child_env
from make_old_file import CRAWL, EXPECTED, FAR_FUTURE
from polling import bounded

import ackqueue

OLD_FILES = {
    commit: os.path.join(TESTS_DIR, "data", f"written_by_{commit}.fs")
    for commit in ("26e4f63", "6ff5410", "924d115")
}
WITH_CRAWL = {"6ff5410", "924d115"}  # written by a tree with puts by key
FORMAT = {"26e4f63": 1, "6ff5410": 1, "924d115": 2}  # the stored format each wrote
KINDS = {
    "fifo": ackqueue.AckQueue,
    "priority": ackqueue.PriorityAckQueue,
    "lifo": ackqueue.LifoAckQueue,
}


@pytest.fixture(params=sorted(OLD_FILES))
def written_by(request) -> str:
    """The commit that wrote the old file under test."""
    return str(request.param)


@pytest.fixture
def old_file(tmp_path, written_by) -> str:
    path = os.path.join(tmp_path, "old.fs")
    shutil.copyfile(OLD_FILES[written_by], path)
    return path


def open_queue(path: str, name: str, **options: Any) -> ackqueue.AckQueue:
    expected = EXPECTED[name]
    return KINDS[expected["kind"]](path, name=name, **{**expected["options"], **options})


def ready_items(name: str) -> list[Any]:
    delayed = EXPECTED[name]["delayed"]
    return [item for item in EXPECTED[name]["order"] if item not in delayed]


def drain(c: ackqueue.Consumer) -> list[tuple[Any, int]]:
    """Every ready item with its attempt count, held by ``c``."""
    got = []
    for _ in bounded(1_000_000, "draining the old file"):
        try:
            item = c.get_nowait()
        except ackqueue.Empty:
            return got
        # The newest delivery, not c.delivery(item): two held 5s are one object.
        got.append((item, c.deliveries()[-1].attempts))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_item_is_there_in_order_and_the_held_items_are_back(old_file, name) -> None:
    expected = EXPECTED[name]
    with open_queue(old_file, name) as q:
        assert q.qsize() == len(ready_items(name))
        assert q.delayed_count() == len(expected["delayed"])
        assert q.unacked_count() == 0
        assert q.unfinished_tasks == len(expected["order"])
        with q.connect() as c:
            got = drain(c)
            assert [item for item, _ in got] == ready_items(name)
            assert [type(item) for item, _ in got] == [type(item) for item in ready_items(name)]
            assert [attempts for _, attempts in got] == expected["ready_attempts"]
            c.ack_many([item for item, _ in got])
        assert q.qsize() == 0 and q.unacked_count() == 0
    with open_queue(old_file, name) as q:  # the acks were written in the old file's format
        assert (q.qsize(), q.delayed_count()) == (0, len(expected["delayed"]))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_delayed_items_stay_delayed_until_due_then_keep_their_place(old_file, name) -> None:
    with open_queue(old_file, name) as q, q.connect() as c:
        drain(c)
        with pytest.raises(ackqueue.Empty):
            q.get_nowait()
    far = ackqueue.ManualClock(FAR_FUTURE + 1)
    with open_queue(old_file, name, clock=far) as q, q.connect() as c:
        assert q.delayed_count() == 0
        assert [item for item, _ in drain(c)] == EXPECTED[name]["order"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dead_letters_are_listed_and_can_be_requeued(old_file, name) -> None:
    dead = EXPECTED[name]["dead"]
    with open_queue(old_file, name) as q:
        letters = q.dead_letters()
        assert [(d.item, d.attempts) for d in letters] == [(item, n) for item, n, _ in dead]
        for letter, (_, _, reason) in zip(letters, dead, strict=True):
            assert reason in letter.reason and letter.when > 0
        assert q.dead_count() == len(dead)
        q.requeue_dead()
        assert q.dead_count() == 0 and q.dead_letters() == []
        assert q.qsize() == len(ready_items(name)) + len(dead)
        with q.connect() as c:
            got = [item for item, _ in drain(c)]
        assert sorted(map(repr, got)) == sorted(map(repr, ready_items(name) + [d[0] for d in dead]))


def run_cli(*args: str) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "ackqueue", *args, "--json"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def as_json_shows(item: object) -> object:
    """An item as the reading commands' --json gives it: itself if JSON carries it unchanged,
    else its repr (flagged item_is_repr)."""
    try:
        if json.loads(json.dumps(item, allow_nan=False)) == item:
            return item
    except (TypeError, ValueError):
        pass
    return repr(item)


def test_the_command_line_reads_the_old_file(old_file, written_by) -> None:
    stats = run_cli("stats", old_file)
    assert stats["live_pid"] is None and stats["holds_known"]
    by_name = {queue["name"]: queue for queue in stats["queues"]}
    crawl = ["crawl"] if written_by in WITH_CRAWL else []
    assert sorted(by_name) == sorted([*EXPECTED, *crawl])
    for name, expected in EXPECTED.items():
        queue = by_name[name]
        assert queue["kind"] == expected["kind"]
        assert (queue["ready"], queue["held"], queue["delayed"], queue["dead"]) == (
            len(ready_items(name)), 0, len(expected["delayed"]), len(expected["dead"])
        )
        peeked = run_cli("peek", old_file, "--name", name, "-n", "100")
        assert [(p["item"], p["state"]) for p in peeked] == [
            (as_json_shows(item), "delayed" if item in expected["delayed"] else "ready")
            for item in expected["order"]
        ]
        letters = run_cli("dead", old_file, "--name", name)
        assert [(d["item"], d["attempts"]) for d in letters] == [
            (as_json_shows(item), n) for item, n, _ in expected["dead"]
        ]
    with open(old_file, "rb") as copy, open(OLD_FILES[written_by], "rb") as original:
        assert copy.read() == original.read()  # the reading commands changed nothing


@pytest.fixture
def crawl_file(tmp_path) -> str:
    path = os.path.join(tmp_path, "old.fs")
    shutil.copyfile(OLD_FILES["6ff5410"], path)
    return path


def open_crawl(path: str) -> ackqueue.AckQueue:
    return ackqueue.AckQueue(path, name="crawl", **CRAWL["options"])


def test_keys_seen_set_and_groups_of_a_file_from_before_formats_are_kept(crawl_file) -> None:
    live = CRAWL["live"]
    with open_crawl(crawl_file) as q:
        assert q.unfinished_tasks == len(live) and q.unacked_count() == 0
        assert q.qsize() == len(live) - 1  # the paused group's item is not counted ready
        assert q.seen(CRAWL["seen"])
        assert q.put("again", key=CRAWL["seen"]) is False  # remembered forever
        for _, key, group in live:
            if key is not None:
                assert q.put("duplicate", key=key, group=group) is False  # live
        with q.connect() as c:
            got = {c.get_nowait(): None for _ in range(len(CRAWL["first_gets"]))}
            assert set(got) == CRAWL["first_gets"]  # b is paused; a holds one at a time
            with pytest.raises(ackqueue.Empty):
                c.get_nowait()
            c.ack(next(item for item in got if item == CRAWL["held"]))
            following = c.get_nowait()
            assert following == "a2"  # the group's next, once its held item is done
            c.ack_many([following, *(item for item in got if item != CRAWL["held"])])
        assert q.remove_group(CRAWL["paused_group"]) == 1
        assert q.qsize() == 0
        assert q.put("a1 again", key="https://a/1") is False  # acked: in the seen-set now
    with open_crawl(crawl_file) as q:  # what this code wrote opens again
        assert q.qsize() == 0 and q.seen(CRAWL["seen"]) and q.seen("https://a/2")


@pytest.mark.parametrize("commit", sorted(OLD_FILES))
def test_an_old_file_keeps_its_format_and_opens_only_with_pickle(tmp_path, commit) -> None:
    path = os.path.join(tmp_path, "old.fs")
    shutil.copyfile(OLD_FILES[commit], path)
    with pytest.raises(ackqueue.SerializerMismatchError, match="'pickle', not 'json'"):
        ackqueue.AckQueue(path, name="jobs", max_attempts=3, serializer="json")
    with open_queue(path, "jobs") as q:
        assert q.qsize() == len(ready_items("jobs"))
        record = q._book.read(lambda record: (record.format_version, record.serializer))
        # Read as it is (no version means the first format): an older ackqueue still can.
        assert record == (FORMAT[commit], "pickle")


@pytest.mark.parametrize("commit", sorted(OLD_FILES))
def test_an_old_file_takes_inline_entries_beside_its_records_and_says_so(
    tmp_path, commit
) -> None:
    """A put stores its entry inline beside the old file's records and raises the record to
    format 3 (an older ackqueue must refuse it, not misread the new entries); the old entries
    and the new come back in order, reopened too."""
    path = os.path.join(tmp_path, "old.fs")
    shutil.copyfile(OLD_FILES[commit], path)
    ready = ready_items("jobs")
    with open_queue(path, "jobs") as q:
        q.put("new one")
        stored = q._book.read(lambda record: (
            record.format_version,
            [type(entry).__name__ for _, entry in record.entry_items()],
        ))
    assert stored[0] == 3
    assert stored[1].count("InlineEntry") == 1 and stored[1][-1] == "InlineEntry"
    with open_queue(path, "jobs") as q, q.connect() as c:
        got = [item for item, _ in drain(c)]
    assert got == [*ready, "new one"]
