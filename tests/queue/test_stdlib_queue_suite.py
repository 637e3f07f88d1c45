"""CPython's own queue tests (``Lib/test/test_queue.py``, the pure-Python classes) run against
AckQueue, LifoAckQueue and PriorityAckQueue, in memory and on a file, on whichever Python runs
this: the drop-in promise, checked by the standard library's judge rather than ours.

The stdlib tests name their queue classes by the standard library's names (they look up the
expected order by ``q.__class__.__name__``) and pass ``maxsize`` positionally, so each class
here is a thin subclass that carries the stdlib's name and opens its own storage.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

import pytest
from conftest import TESTS_DIR, child_env

import ackqueue

stdlib = pytest.importorskip(
    "test.test_queue", reason="this Python was installed without its test suite"
)


def _in_memory(base: type[ackqueue.AckQueue], name: str) -> type:
    def __init__(self, maxsize: int = 0) -> None:
        base.__init__(self, None, maxsize=maxsize)

    return type(name, (base,), {"__init__": __init__})


class _TempFiles:
    """Queues on fresh FileStorage files in one temporary directory, closed after each test."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="stdlib-queue-")
        self.opened: list[ackqueue.AckQueue] = []

    def kind(self, base: type[ackqueue.AckQueue], name: str) -> type:
        files = self

        def __init__(self, maxsize: int = 0) -> None:
            path = os.path.join(files.dir, f"q{len(files.opened)}.fs")
            base.__init__(self, path, maxsize=maxsize)
            files.opened.append(self)

        return type(name, (base,), {"__init__": __init__})

    def close(self) -> None:
        for q in self.opened:
            q.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _module(make: types.FunctionType) -> types.SimpleNamespace:
    """What the stdlib tests reach through ``self.queue``."""
    return types.SimpleNamespace(
        Queue=make(ackqueue.AckQueue, "Queue"),
        LifoQueue=make(ackqueue.LifoAckQueue, "LifoQueue"),
        PriorityQueue=make(ackqueue.PriorityAckQueue, "PriorityQueue"),
        Full=queue.Full,
        Empty=queue.Empty,
        ShutDown=getattr(queue, "ShutDown", ackqueue.ShutDown),
    )


# Where ackqueue still differs from queue.Queue: the lead's core work on issue 15 closes these;
# strict, so that the fix shows as an unexpected pass and its mark is removed with it.
KNOWN_GAPS: dict[str, str] = {}  # test name -> reason
# A test that hung (a hang cannot fail by itself) runs in a child with a deadline instead.
# The join() hang after shutdown(immediate=True) is fixed (issue 15); what still differs is
# by design for now (docs: an immediate shutdown keeps ready items stored for the next
# start), so qsize() is not 0 after it as the stdlib test expects. The lead decides.
HANGS: dict[str, str] = {}
HANG_WATCHED = "TestAckQueueInMemory"  # remove the skips of the other classes with the fix
HANG_DEADLINE = 60.0  # queue.Queue takes 0.2 s here, ackqueue in memory ~17 s without immediate
# 64k puts, each a commit with an fsync, take ~30 s per class on a file; in memory they run the
# same logic in about half that, so the file-backed classes leave these to the in-memory ones.
SLOW_ON_FILES = ("test_shutdown_all_methods_in_many_threads",
                 "test_shutdown_immediate_all_methods_in_many_threads")
IN_CHILD = "ACKQUEUE_STDLIB_SUITE_CHILD"


def _xfail(cls: type, name: str, reason: str, body) -> None:  # type: ignore[no-untyped-def]
    def test(self):  # type: ignore[no-untyped-def]
        return body(self)

    test.__name__ = name
    setattr(cls, name, pytest.mark.xfail(strict=True, reason=reason)(test))


def _in_child(cls_name: str, name: str):  # type: ignore[no-untyped-def]
    def run(self):  # type: ignore[no-untyped-def]
        if os.environ.get(IN_CHILD):
            return getattr(super(type(self), self), name)()
        here = TESTS_DIR
        env = child_env(**{IN_CHILD: "1"})
        env["PYTHONPATH"] = os.pathsep.join([here, TESTS_DIR, env["PYTHONPATH"]])
        child = subprocess.Popen(
            [sys.executable, "-m", "unittest", f"{__name__}.{cls_name}.{name}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            out, _ = child.communicate(timeout=HANG_DEADLINE)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise AssertionError(f"{name} still running after {HANG_DEADLINE:.0f} s") from None
        assert child.returncode == 0, out

    return run


def _marked(cls: type) -> type:
    """``cls`` with the known gaps marked and the hanging tests run in a child."""
    for name, reason in KNOWN_GAPS.items():
        body = getattr(cls, name, None)
        if body is not None:
            _xfail(cls, name, reason, body)
    for name, reason in HANGS.items():
        if getattr(cls, name, None) is None or name in vars(cls):
            continue
        if cls.__name__ == HANG_WATCHED:
            _xfail(cls, name, reason, _in_child(cls.__name__, name))
        else:  # each hang costs the whole deadline: one class shows it, the others wait
            setattr(cls, name, unittest.skip(f"{reason}; run by {HANG_WATCHED}")(
                getattr(cls, name)))
    return cls


class _InMemory:
    def setUp(self) -> None:
        self.queue = _module(_in_memory)
        super().setUp()  # type: ignore[misc]


class _OnFiles:
    def setUp(self) -> None:
        if self._testMethodName in SLOW_ON_FILES:  # type: ignore[attr-defined]
            self.skipTest("64k fsynced puts; the in-memory classes run this")  # type: ignore[attr-defined]
        files = _TempFiles()
        self.addCleanup(files.close)  # type: ignore[attr-defined]
        self.queue = _module(files.kind)
        super().setUp()  # type: ignore[misc]


@_marked
class TestAckQueueInMemory(_InMemory, stdlib.QueueTest, unittest.TestCase):
    pass


@_marked
class TestLifoAckQueueInMemory(_InMemory, stdlib.LifoQueueTest, unittest.TestCase):
    pass


@_marked
class TestPriorityAckQueueInMemory(_InMemory, stdlib.PriorityQueueTest, unittest.TestCase):
    pass


@_marked
class TestAckQueueOnFile(_OnFiles, stdlib.QueueTest, unittest.TestCase):
    pass


@_marked
class TestLifoAckQueueOnFile(_OnFiles, stdlib.LifoQueueTest, unittest.TestCase):
    pass


@_marked
class TestPriorityAckQueueOnFile(_OnFiles, stdlib.PriorityQueueTest, unittest.TestCase):
    pass


class TestFailingAckQueue(_InMemory, stdlib.FailingQueueTest, unittest.TestCase):
    pass
