"""What a failed open leaves behind, and what ZODB would print that a queue user cannot act on."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import warnings

import pytest
import ZODB
from conftest import child_argv, child_env
from ZODB.MappingStorage import MappingStorage

import ackqueue


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _sqlite(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table t (x)")


@pytest.mark.parametrize(
    "make, error",
    [
        (os.mkdir, ackqueue.StorageError),
        (lambda p: _write(p, "a text file, not a database\n"), ackqueue.NotAQueueFileError),
        (_sqlite, ackqueue.NotAQueueFileError),
        (lambda p: _write(p, "ab"), ackqueue.NotAQueueFileError),
    ],
    ids=["directory", "text", "sqlite", "two-bytes"],
)
def test_a_failed_open_leaves_nothing_beside_the_users_file(tmp_path, make, error):
    path = str(tmp_path / "theirs")
    make(path)
    with pytest.raises(error):
        ackqueue.AckQueue(path)
    assert sorted(os.listdir(tmp_path)) == ["theirs"]


def test_a_failed_open_of_a_locked_file_leaves_the_holders_lock_alone(qpath):
    with ackqueue.AckQueue(qpath):
        child = subprocess.run(
            child_argv("import sys, ackqueue\ntry:\n    ackqueue.AckQueue(sys.argv[1])\n"
                       "except ackqueue.QueueLockedError:\n    print('locked')", qpath),
            env=child_env(), capture_output=True, text=True, timeout=60,
        )
        assert child.stdout == "locked\n", child.stderr
        assert os.path.exists(qpath + ".lock")


BIG = 17 * 1024 * 1024  # past ZODB's default large_record_size of 16 MB


@pytest.mark.parametrize("where", ["file", "memory", "callers-db"])
def test_a_big_item_prints_no_zodb_warning(qpath, where):
    db = ZODB.DB(MappingStorage()) if where == "callers-db" else None
    q = ackqueue.AckQueue(qpath if where == "file" else None, db=db)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            q.put(b"x" * BIG)
            with q.connect() as c:
                c.ack(c.get())
        assert not [w for w in caught if "large" in str(w.message)], caught[0].message
    finally:
        q.close()
        if db is not None:
            db.close()


KILLED_AFTER_PUT = """
import os, signal, sys, ackqueue
q = ackqueue.AckQueue(sys.argv[1])
q.put(1)
os.kill(os.getpid(), signal.SIGKILL)
"""

REOPEN = """
import logging, sys, ackqueue
if sys.argv[2] == "info":
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
with ackqueue.AckQueue(sys.argv[1]) as q:
    print(q.qsize())
"""


@pytest.mark.parametrize("logging_on", [False, True], ids=["no-logging", "info-logging"])
def test_reopening_after_kill_9_says_it_in_ackqueues_words_only(qpath, logging_on):
    # A new file's first index is saved while it is nearly empty; a kill -9 then leaves it
    # behind the file, and the next open rebuilds it (ZODB: "Ignoring index for ...").
    killed = subprocess.run(child_argv(KILLED_AFTER_PUT, qpath), env=child_env(), timeout=60)
    assert killed.returncode == -signal.SIGKILL
    reopened = subprocess.run(child_argv(REOPEN, qpath, "info" if logging_on else "quiet"),
                              env=child_env(), capture_output=True, text=True, timeout=60)
    assert reopened.stdout == "1\n" and "Ignoring index" not in reopened.stderr
    if logging_on:
        assert "ackqueue INFO" in reopened.stderr and "rebuilding its index" in reopened.stderr
    else:
        assert reopened.stderr == ""


def test_other_zodb_index_warnings_still_reach_their_logger(tmp_path):
    """The filter hides the notice for files ackqueue opens, not for anyone else's."""
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    zodb_log = logging.getLogger("ZODB.FileStorage")
    zodb_log.addHandler(handler)
    other = str(tmp_path / "someone-elses.fs")
    try:
        zodb_log.warning("Ignoring index for %s", other)
        zodb_log.warning("%s time-stamp reduction at %s", other, 4)  # damage, in another file
        zodb_log.warning("a message without arguments")
    finally:
        zodb_log.removeHandler(handler)
    assert [r.getMessage() for r in records] == [
        f"Ignoring index for {other}",
        f"{other} time-stamp reduction at 4",
        "a message without arguments",
    ]
