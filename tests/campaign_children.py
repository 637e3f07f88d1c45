"""What the kill campaigns (``shared_campaign.py``, ``keys_campaign.py``) and the tests that
kill processes share: starting a child process that runs the tree at ``root`` and waiting until
it says its queue is open, and finding the private server of ``shared=True`` to kill it.

A child prints ``open`` on its first line once its queue is open, so that the campaign never
kills it before it has done anything (a kill point is chosen from what the child logged).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys


def env_at(root: str) -> dict[str, str]:
    """The environment of a child running the ackqueue tree at ``root``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def start_child(
    code: str, args: list[str], env: dict[str, str], keep_stderr: bool = False,
    stderr_path: str | None = None,
) -> subprocess.Popen[str]:
    """``python -c code *args``, once it printed ``open``; else an AssertionError with its exit
    status (and the end of its stderr, kept with ``keep_stderr``: then the caller must read it,
    e.g. with ``communicate()`` after the kill, or a child writing much would block).
    With ``stderr_path`` its stderr goes to that file instead (see :func:`stderr_tail`)."""
    with open(stderr_path, "a") if stderr_path else contextlib.nullcontext() as err_file:
        p = subprocess.Popen([sys.executable, "-c", code, *args], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=err_file or (subprocess.PIPE if keep_stderr else None),
                             text=True)
    assert p.stdout is not None
    if p.stdout.readline().strip() == "open":
        return p
    if p.poll() is None:
        p.kill()
    _out, err = p.communicate(timeout=30)
    if stderr_path:
        err = stderr_tail(stderr_path)
    raise AssertionError(
        f"a child did not open the queue (exit {p.returncode}): {(err or '')[-2000:]}"
    )


def server_pid(path: str) -> int | None:
    """The pid the private server of ``shared=True`` for ``path`` wrote in its lock file, or
    None while no server has written one."""
    from ackqueue.storage import zeo

    try:
        with open(os.path.join(zeo.private_dir(path), zeo.SERVER_LOCK)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def stderr_tail(path: str, chars: int = 3000) -> str:
    """The end of a child's stderr file (written with ``start_child(stderr_path=...)``)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""
