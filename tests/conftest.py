import importlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from typing import Any

import pytest
from hypothesis import settings
from polling import bounded

# In CI every run tries the same examples (derandomized), so that whether a bug is caught does
# not depend on luck; elsewhere hypothesis explores, and keeps what it finds in its database.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# The contract suite's ``queues`` fixture, the session's PostgreSQL server, and the guard that
# keeps a failing hypothesis test from aborting the run (see those modules for why they are
# plugins).
pytest_plugins = ["contracts.implementations", "postgres_server", "failure_guard"]

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))  # the helpers and children live here
REPO_ROOT = os.path.dirname(TESTS_DIR)


def seed_for(default: int) -> int:
    """The seed of a randomized test: ``default`` unless ``ACKQUEUE_TEST_SEED`` says otherwise
    (a number, or ``random`` to explore; the seed used is printed so a failure can be rerun)."""
    chosen = os.environ.get("ACKQUEUE_TEST_SEED", "")
    if chosen == "random":
        seed = random.SystemRandom().randrange(1_000_000)
    else:
        seed = int(chosen) if chosen else default
    print(f"seed {seed} (rerun with ACKQUEUE_TEST_SEED={seed})")
    return seed


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python process that must import this tree's ackqueue."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def child_argv(code: str, *args: str) -> list[str]:
    """argv to run ``code`` in a fresh interpreter."""
    return [sys.executable, "-c", code, *args]


def stored_items(path: str) -> list[object]:
    """The items stored in the queue file at ``path``, in order, read through a consumer
    that acks nothing (so the file is left as it was)."""
    import ackqueue

    with ackqueue.AckQueue(path) as q, q.connect() as c:
        items = []
        for _ in bounded(10_000_000, "reading the stored items"):
            try:
                items.append(c.get_nowait())
            except ackqueue.Empty:
                break
        assert q.unacked_count() == len(items)
        return items


def drain(source: Any) -> list[Any]:
    """Every item ready now, taken with ``source.get_nowait()`` (a queue or a consumer), in the
    order handed out."""
    from polling import bounded

    import ackqueue

    got = []
    for _ in bounded(1_000_000, "draining the queue"):
        try:
            got.append(source.get_nowait())
        except ackqueue.Empty:
            break
    return got


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A server started by a child is a child of nobody here; one this process started is
    # reaped by nobody either: a zombie counts as gone. Reaped between the two looks (its
    # /proc entry gone, or going while it is read: ESRCH, seen in CI): gone too.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def spawn_child(code: str, *args: str) -> subprocess.Popen[str]:
    """Run ``code`` in a fresh interpreter on this tree, its stdin and stdout piped as text."""
    return subprocess.Popen(
        child_argv(code, *args),
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def qpath(tmp_path):
    """A fresh FileStorage path in a temporary directory."""
    return os.path.join(tmp_path, "queue.fs")


@pytest.fixture
def short_qpath():
    """A fresh FileStorage path in a directory whose path is short: a shared queue keeps its
    server's socket beside the file only while that path fits a Unix socket address (108
    bytes), and pytest's own temporary paths grow with its run number past that."""
    directory = tempfile.mkdtemp(prefix="aq-")
    yield os.path.join(directory, "queue.fs")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def vanishing_class(tmp_path):
    """A class importable now, gone later (an item whose class a later program lacks):
    ``(module, remove)``; ``module.Gone`` is the class, ``remove()`` takes its module away."""
    name = f"gone_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("class Gone:\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    module = importlib.import_module(name)

    def remove() -> None:
        os.remove(tmp_path / f"{name}.py")
        sys.modules.pop(name, None)
        importlib.invalidate_caches()

    yield module, remove
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def stored_counts(path: str) -> dict[str, tuple[int, int]]:
    """Per queue of the file at ``path``: (entries in its tree, less those its writer deleted
    through the entry log and not yet from the tree, as every reader leaves them out; its
    count as a reader computes it), read-only."""
    import ZODB

    from ackqueue.records import ROOT_KEY, attach_entry_log, detach_entry_log
    from ackqueue.storage import counts
    from ackqueue.storage.filestorage import QueueFileStorage

    db = ZODB.DB(QueueFileStorage(path, read_only=True))
    conn = db.open()
    try:
        attach_entry_log(conn, counts.ReplayedDrops(db.storage, conn))
        queues = conn.root()[ROOT_KEY]
        return {
            name: (record.entry_count(), counts.stored_count(record))
            for name, record in queues.items()
        }
    finally:
        detach_entry_log(conn)
        db.close()
