import os
import sys

import pytest

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


@pytest.fixture
def qpath(tmp_path):
    """A fresh FileStorage path in a temporary directory."""
    return os.path.join(tmp_path, "queue.fs")
