"""Every pool checks the options they share the same way, in its constructor: a thread pool,
an asyncio pool and a process pool (which must refuse before it starts any worker process,
each of which would fail on the option and be restarted for ever)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

import ackqueue
from ackqueue.aio import AsyncAckQueue

BAD = [
    ({"prefetch": 0}, "prefetch"),
    ({"prefetch": 2.5}, "prefetch"),
    ({"poll": 0}, "poll"),
    ({"poll": float("nan")}, "poll"),
    ({"stop_timeout": -1}, "stop_timeout"),
    ({"log_interval": -0.5}, "log_interval"),
]


async def _noop(item: object) -> None:
    pass


@pytest.mark.parametrize(("options", "named"), BAD)
def test_a_thread_pool_refuses_a_bad_option(qpath, options, named):
    with ackqueue.AckQueue(qpath) as q, pytest.raises(ValueError, match=named):
        ackqueue.WorkerPool(q, lambda item: None, **options)


@pytest.mark.parametrize(("options", "named"), BAD)
def test_an_asyncio_pool_refuses_a_bad_option(qpath, options, named):
    async def main() -> None:
        q = AsyncAckQueue(qpath)
        try:
            with pytest.raises(ValueError, match=named):
                ackqueue.AsyncWorkerPool(q, _noop, **options)
        finally:
            await q.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(("options", "named"), BAD)
def test_a_process_pool_refuses_a_bad_option_before_starting(tmp_path, options, named):
    path = os.path.join(tmp_path, "q.fs")
    with pytest.raises(ValueError, match=named):
        ackqueue.ProcessPool(path, print, processes=1, **options)
    assert not os.path.exists(path)  # nothing was started, so nothing opened the file


def test_good_options_are_taken(qpath):
    with ackqueue.AckQueue(qpath, ack_timeout=30) as q:
        pool = ackqueue.WorkerPool(q, lambda item: None, threads=3, stop_timeout=0, log_interval=0)
        assert pool.prefetch == 3  # with a lease: as far as the workers reach
        assert ackqueue.WorkerPool(q, lambda item: None, threads=2, prefetch=7).prefetch == 7


# -- the positional arguments: queue, handler, how many, retry ---------------------------------

@pytest.mark.parametrize(("options", "named"), [
    ({"base": -1}, "base"),  # once: the pool waited for ever after the first failure
    ({"base": float("nan")}, "base"),
    ({"base": float("inf")}, "base"),
    ({"base": "1"}, "base"),
    ({"factor": 0.5}, "factor"),
    ({"max_delay": -1}, "max_delay"),
    ({"jitter": 2}, "jitter"),
    ({"jitter": -0.1}, "jitter"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 2.5}, "max_attempts"),
    ({"max_attempts": True}, "max_attempts"),
])
def test_a_retry_refuses_a_value_that_cannot_make_sense(options, named):
    with pytest.raises(ValueError, match=f"Retry {named} must be"):
        ackqueue.Retry(**options)


def test_a_retry_takes_no_cap_and_no_wait():
    assert ackqueue.Retry(base=0, jitter=0, max_delay=float("inf")).delay(5) == 0
    assert ackqueue.Retry(base=1, factor=1, jitter=0, max_attempts=3).delay(9) == 1


def test_a_thread_pool_refuses_nonsense_positional_arguments(qpath):
    with ackqueue.AckQueue(qpath) as q:
        with pytest.raises(TypeError, match="handler must be a function"):
            ackqueue.WorkerPool(q, None)  # type: ignore[arg-type]  # once retried for ever
        with pytest.raises(TypeError, match="queue must be an open AckQueue"):
            ackqueue.WorkerPool(qpath, print)  # type: ignore[arg-type]  # once: thread tracebacks
        for threads in (0, "4", True, 2.0):
            with pytest.raises(ValueError, match="threads must be a whole number"):
                ackqueue.WorkerPool(q, print, threads)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="retry must be a Retry"):
            ackqueue.WorkerPool(q, print, 2, 0.5)  # type: ignore[arg-type]


def test_a_process_pool_refuses_nonsense_positional_arguments(tmp_path):
    path = os.path.join(tmp_path, "q.fs")
    with pytest.raises(TypeError, match="handler must be a function"):
        ackqueue.ProcessPool(path, None, processes=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="processes must be a whole number"):
        ackqueue.ProcessPool(path, print, processes="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads must be a whole number"):
        ackqueue.ProcessPool(path, print, processes=1, threads=0)
    with pytest.raises(TypeError, match="retry must be a Retry"):
        ackqueue.ProcessPool(path, print, 1, 1, {"base": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kind must be AckQueue"):
        ackqueue.ProcessPool(path, print, processes=1, kind=dict)  # type: ignore[arg-type]
    assert not os.path.exists(path)


def test_an_asyncio_pool_refuses_a_path_for_its_queue(qpath):
    with pytest.raises(TypeError, match="queue must be an open AsyncAckQueue"):
        ackqueue.AsyncWorkerPool(qpath, _noop)  # type: ignore[arg-type]
    assert not os.path.exists(qpath)


MISMATCHED = """\
import ackqueue

def shout(text: str) -> None:
    print(text.upper())

numbers: ackqueue.AckQueue[int] = ackqueue.AckQueue()
ackqueue.WorkerPool(numbers, shout)
ackqueue.WorkerPool("jobs.fs", shout)
"""


def test_mypy_catches_a_mismatched_handler_or_a_path_for_the_queue(tmp_path):
    pytest.importorskip("mypy")
    (tmp_path / "user.py").write_text(MISMATCHED)
    env = {**os.environ, "MYPYPATH": REPO_ROOT}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "--python-executable", sys.executable, "user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    report = done.stdout
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["7", "8"], report
    assert "Argument 2" in errors[0] and "[arg-type]" in errors[0], report  # the handler
    assert "Argument 1" in errors[1] and "AckQueue" in errors[1], report  # the path
