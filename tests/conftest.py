import os
import subprocess
import sys
from typing import Any

import pytest

# The contract suite's ``queues`` fixture (see that module for why it is a plugin).
pytest_plugins = ["contracts.implementations"]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        while True:
            try:
                items.append(c.get_nowait())
            except ackqueue.Empty:
                break
        assert q.unacked_count() == len(items)
        return items


def drain(source: Any) -> list[Any]:
    """Every item ready now, taken with ``source.get_nowait()`` (a queue or a consumer), in the
    order handed out."""
    import ackqueue

    got = []
    while True:
        try:
            got.append(source.get_nowait())
        except ackqueue.Empty:
            return got


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
