"""Files ackqueue makes beside a queue file are made anew, never through a planted symlink:
in a directory others may write, a link at one of their names must not make the queue's owner
truncate, overwrite or chmod a file the link points to."""

from __future__ import annotations

import os
import pickle
import stat

import pytest
from polling import wait_until

import ackqueue
from ackqueue.queue.status import status_path


def test_a_symlink_planted_at_the_status_scratch_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    victim.chmod(0o644)
    path = str(tmp_path / "q.fs")
    os.symlink(victim, f"{status_path(path)}.{os.getpid()}.tmp")
    with ackqueue.AckQueue(path) as q:
        q.put(1)
        with q.connect() as c:
            c.get()  # a held item: the status file is written
            wait_until(lambda: os.path.isfile(status_path(path)), what="the status file")
    assert victim.read_text() == "precious"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not os.path.islink(status_path(path))


def test_a_damaged_files_kept_copy_is_not_written_through_a_planted_symlink(tmp_path):
    from ackqueue.storage.filestorage import copy_exclusively

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    source = tmp_path / "q.fs"
    source.write_bytes(b"FS21data")
    os.symlink(victim, str(source) + ".tr0.before")
    with pytest.raises(FileExistsError):
        copy_exclusively(str(source), str(source) + ".tr0.before")
    assert victim.read_text() == "precious"


# Found by benchmarks/fs_faults.py (the second-user move): ZODB's FileStorage writes its index
# through ``<file>.index.index_tmp`` opened with "wb" and its commits' first phase through
# ``<file>.tmp`` opened with "w+b", and zc.lockfile writes the pid into ``<file>.lock`` opened
# with "a+": each followed a link planted at the name (issue 21 item 13).
@pytest.mark.parametrize("suffix", [".index.index_tmp", ".tmp", ".lock"])
def test_a_symlink_planted_at_a_storage_file_name_is_not_followed(tmp_path, suffix):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = str(tmp_path / "q.fs")
    os.symlink(victim, path + suffix)
    with ackqueue.AckQueue(path) as q:  # the close saves the index
        q.put(1)
    assert victim.read_bytes() == b"precious"
    assert not os.path.islink(path + suffix)


class _Runs:
    """A pickle that makes a directory when it is loaded: code run by whoever unpickles it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_index_file_of_another_user_is_refused_not_unpickled(tmp_path):
    # FileStorage unpickles <file>.index at open with ZODB's plain unpickler: one that another
    # user put there (before the queue first made its own, in a directory she may write) would
    # run her code as the queue's owner.
    path = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put(1)
    marker = str(tmp_path / "her-code-ran")
    with open(path + ".index", "wb") as f:
        pickle.dump(_Runs(marker), f)
    os.chown(path + ".index", 65534, 65534)
    with pytest.raises(ackqueue.StorageError, match=r"q\.fs\.index, beside the queue file, is "
                       r"not a file of this user's \(owner uid 65534\)"):
        ackqueue.AckQueue(path)
    assert not os.path.exists(marker)
