"""Every pool checks the options they share the same way, in its constructor: a thread pool,
an asyncio pool and a process pool (which must refuse before it starts any worker process,
each of which would fail on the option and be restarted for ever)."""

from __future__ import annotations

import asyncio
import os

import pytest

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
