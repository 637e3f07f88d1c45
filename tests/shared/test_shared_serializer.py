"""``serializer=`` in shared mode: items go between processes as the serializer encodes them,
the private server stores and serves their bytes without decoding them, and a crafted record
of a file served so runs nothing in any process.

The servers these tests start stop themselves one second after their last client leaves
(``ACKQUEUE_SERVER_IDLE``, inherited by every child).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import spawn_child
from side_effects import (
    craft_metadata,
    metadata_runs_when_trusted,
    poison_first_entry,
    runs_when_trusted,
    targets,
)

import ackqueue


@pytest.fixture(autouse=True)
def quick_idle_exit(monkeypatch):
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")


GETTER = """
import json, sys, ackqueue
with ackqueue.AckQueue(sys.argv[1], shared=True, serializer="json") as q, q.connect() as c:
    item = c.get(timeout=30)
    c.ack(item)
print(json.dumps(item), flush=True)
"""


def test_a_json_queue_passes_items_between_processes_in_shared_mode(qpath) -> None:
    item = {"url": "https://example.org/", "depth": [1, 2], "ok": None}
    with ackqueue.AckQueue(qpath, shared=True, serializer="json") as q:
        assert q.shared
        q.put(item)
        child = spawn_child(GETTER, qpath)
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        assert json.loads(out) == item
        assert q.unfinished_tasks == 0 or q.qsize() == 0
    with pytest.raises(ackqueue.SerializerMismatchError, match="'json', not 'pickle'"):
        ackqueue.AckQueue(qpath, shared=True)


def test_a_process_pool_works_a_json_queue(tmp_path) -> None:
    import process_handlers

    path, directory = str(tmp_path / "q.fs"), str(tmp_path)
    with ackqueue.AckQueue(path, shared=True, serializer="json") as q:
        q.put_many([{"n": n, "dir": directory, "processes": 1} for n in range(5)])
    pool = ackqueue.ProcessPool(path, process_handlers.together, processes=1,
                                queue_options={"serializer": "json"})
    stats = pool.run_until_empty()
    assert (stats.done, stats.failed, stats.dead) == (5, 0, 0)
    with open(os.path.join(directory, "log")) as f:
        assert sorted(int(line.split()[1]) for line in f) == list(range(5))


@pytest.mark.parametrize("target", ["os.system", "a test module's class"])
def test_a_crafted_entry_served_in_shared_mode_runs_nothing(tmp_path, target) -> None:
    path, marker = str(tmp_path / "crafted.fs"), str(tmp_path / "RAN")
    with ackqueue.AckQueue(path, serializer="json") as q:
        q.put_many(["first", "second"])
    poison_first_entry(path, targets(marker)[target])
    assert runs_when_trusted(path, marker)
    with ackqueue.AckQueue(path, shared=True, serializer="json") as q, q.connect() as c:
        with pytest.raises(ackqueue.ItemLoadError, match="not a persistent class of ackqueue"):
            c.get(timeout=10)
        second = c.get(timeout=10)
        assert second == "second"
        c.ack(second)
        assert q.dead_count() == 1
    assert not os.path.exists(marker)


def test_crafted_metadata_read_by_the_private_server_runs_nothing(short_qpath) -> None:
    """A shared opener settles the count a killed writer left in the commits' metadata; the
    private server reads that metadata on its side (ZEO's iterator), and runs none of it.
    (``os.system`` only: the server cannot import the test modules the other targets name, so
    they would run nothing there with or without the restriction.)"""
    path = short_qpath
    directory = os.path.dirname(path)
    marker, writer = os.path.join(directory, "RAN"), os.path.join(directory, "writer.fs")
    q = ackqueue.AckQueue(writer, serializer="json")
    try:
        q.put_many(["first", "second", "third"])
        q.put("fourth")
        shutil.copyfile(writer, path)  # what kill -9 would leave now
    finally:
        q.close()
    craft_metadata(path, targets(marker)["os.system"])
    assert metadata_runs_when_trusted(path, marker)
    with ackqueue.AckQueue(path, shared=True, serializer="json") as q, q.connect() as c:
        assert q.qsize() == 4
        got = [c.get(timeout=10) for _ in range(4)]
        assert got == ["first", "second", "third", "fourth"]
        for item in got:
            c.ack(item)
    assert not os.path.exists(marker)


def test_the_private_server_resolves_conflicts_without_running_a_crafted_state(
    tmp_path, monkeypatch
) -> None:
    """ZODB resolves a conflict by loading the committed state of the record with a loader of
    its own; the private server restricts it as every ackqueue database is restricted."""
    import ZODB
    import ZODB.ConflictResolution
    import ZODB.FileStorage
    from BTrees.Length import Length
    from side_effects import Call, touch
    from ZODB.POSException import ConflictError

    from ackqueue.storage.zeoserver import restrict_conflict_resolution

    path, marker = str(tmp_path / "conflict.fs"), str(tmp_path / "RAN")
    db = ZODB.DB(ZODB.FileStorage.FileStorage(path))
    with db.transaction() as conn:
        conn.root()["n"] = Length(1)
    with db.transaction() as conn:
        length = conn.root()["n"]
        oid, old = length._p_oid, length._p_serial
    with db.transaction() as conn:
        conn.root()["n"].value = Call(touch, marker)  # the crafted committed state
    with db.transaction() as conn:
        committed = conn.root()["n"]._p_serial
    storage = db.storage
    new = storage.loadSerial(oid, old)  # a client's change made from the old state

    def resolve() -> None:
        storage.tryToResolveConflict(oid, committed, old, new)

    monkeypatch.setattr(ZODB.ConflictResolution, "find_global",
                        ZODB.ConflictResolution.find_global)  # restored after the test
    try:
        with pytest.raises(Exception):  # noqa: B017  (unrestricted, it runs the state's code)
            resolve()
        assert os.path.exists(marker)
        os.remove(marker)
        restrict_conflict_resolution()
        with pytest.raises(ConflictError):
            resolve()
        assert not os.path.exists(marker)
    finally:
        db.close()
