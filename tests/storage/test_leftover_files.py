"""What a queue leaves beside its file: after close only the file, its .index and its .lock.

FileStorage keeps a scratch file for two-phase commit (``.tmp``) that it never removes, and on
opening a file whose last transaction never finished it saves that tail to ``.tr0``, ``.tr1``,
and so on (``read_index``/``_truncate``), one more after every such crash. Neither holds
anything a queue can use: the tail is a commit that never returned.
"""

from __future__ import annotations

import os

import pytest

import ackqueue

EXPECTED_AFTER_CLOSE = {"q.fs", "q.fs.index", "q.fs.lock"}


def files(directory) -> set[str]:
    return set(os.listdir(directory))


@pytest.mark.parametrize("durability", ["strict", "relaxed"])
def test_open_work_pack_close_reopen_leaves_only_the_file_index_and_lock(tmp_path, durability):
    path = str(tmp_path / "q.fs")
    for _ in range(2):  # the second round reopens what the first closed
        with ackqueue.AckQueue(path, durability=durability) as q:
            q.put_many(range(20))
            with q.connect() as c:
                for _ in range(10):
                    c.ack(c.get())
            q.pack()
            assert not any(
                ".tr" in name or name.endswith((".old", ".pack")) for name in files(tmp_path)
            )
        assert files(tmp_path) == EXPECTED_AFTER_CLOSE
    with ackqueue.AckQueue(path) as q:
        assert q.qsize() == 20


def torn_copy(tmp_path, status_c: bool) -> tuple[str, list[int]]:
    """A queue file whose last transaction never finished (cut short, or still flagged 'c' as
    during a commit), as a crash leaves it; and what the queue held before that commit."""
    source = str(tmp_path / "source.fs")
    with ackqueue.AckQueue(source, autopack=False) as q:
        q.put_many([1, 2, 3])
        start = os.path.getsize(source)
        q.put(4)
        stop = os.path.getsize(source)
        with open(source, "rb") as f:
            data = bytearray(f.read(stop))
    if status_c:
        data[start + 16 : start + 17] = b"c"  # the status byte of the transaction header
    else:
        data = data[: start + 30]  # the header is whole; the records are cut
    torn_dir = tmp_path / "torn"
    torn_dir.mkdir()
    path = str(torn_dir / "q.fs")
    with open(path, "wb") as f:
        f.write(data)
    return path, [1, 2, 3]


@pytest.mark.parametrize("status_c", [False, True], ids=["cut", "unfinished"])
def test_reopening_after_a_torn_commit_leaves_no_truncation_copy(tmp_path, status_c):
    path, before = torn_copy(tmp_path, status_c)
    # One from an earlier crash or from fsrecover is someone else's: it stays as it is.
    with open(path + ".tr0", "wb") as f:
        f.write(b"not ours")
    with ackqueue.AckQueue(path) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == before
    assert files(tmp_path / "torn") == EXPECTED_AFTER_CLOSE | {"q.fs.tr0"}
    with open(path + ".tr0", "rb") as f:
        assert f.read() == b"not ours"


def test_a_commit_scratch_file_removed_under_a_running_queue_costs_nothing(qpath):
    """Someone cleaning the directory deletes ``jobs.fs.tmp`` (FileStorage's scratch file, which
    it keeps open) while the queue runs: puts go on, and the close, which removes that file,
    finds it gone and closes all the same."""
    q = ackqueue.AckQueue(qpath)
    q.put(1)
    os.remove(qpath + ".tmp")
    q.put(2)
    q.close()
    name = os.path.basename(qpath)
    assert files(os.path.dirname(qpath)) == {name, name + ".index", name + ".lock"}
    with ackqueue.AckQueue(qpath) as q:
        assert [q.get_nowait(), q.get_nowait()] == [1, 2]
