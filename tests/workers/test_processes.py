"""``ProcessPool``: worker processes over one queue opened with ``shared=True`` in each, with
real processes: they work at the same time and their counts are merged; a worker process
SIGKILLed in a handler loses nothing (its item comes back when its session lapses, to a worker
process started in its stead); SIGTERM stops the pool gracefully (the running handler
finishes and is acked, the rest stays in the queue); bad arguments are refused before any
process starts.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pool_process_handlers
import process_handlers
import pytest
from conftest import child_env
from contracts.implementations import settled
from polling import wait_until

import ackqueue
from ackqueue.workers import child

LEASE = 2.0


def lines(directory: str) -> list[tuple[str, int, int]]:
    try:
        with open(os.path.join(directory, "log")) as f:
            return [(what, int(n), int(pid)) for what, n, pid in
                    (line.split() for line in f if line.endswith("\n"))]
    except FileNotFoundError:
        return []


def fill(where: str, directory: str, count: int, **extra: Any) -> None:
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        q.put_many([{"n": n, "dir": directory, **extra} for n in range(count)])


@pytest.fixture(params=["file", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A queue every process can open: a file with shared=True, or a PostgreSQL database."""
    if request.param == "file":
        return str(tmp_path / "q.fs")
    return str(request.getfixturevalue("postgres_uri"))


def test_worker_processes_work_at_the_same_time_and_their_counts_add_up(
    where: str, tmp_path: Any
) -> None:
    directory = str(tmp_path)
    fill(where, directory, 20, processes=2)
    pool = ackqueue.ProcessPool(where, process_handlers.together, processes=2, prefetch=1,
                                queue_options={"session_timeout": LEASE})
    stats = pool.run_until_empty()
    assert (stats.done, stats.failed, stats.dead, stats.stopped_by) == (20, 0, 0, None)
    assert pool.restarts == 0
    done = [(n, pid) for what, n, pid in lines(directory) if what == "done"]
    assert sorted(n for n, _ in done) == list(range(20))
    # Two at least (the barrier in the handler saw them at work together); a third when a
    # worker process ended on a stale view of the queue and the pool started another round.
    assert len({pid for _, pid in done}) >= 2
    with ackqueue.AckQueue(where, shared=True) as q:
        assert (q.qsize(), q.unacked_count()) == (0, 0)


def test_a_sigkilled_worker_process_loses_nothing_and_is_replaced(tmp_path: Any) -> None:
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 10)
    pool = ackqueue.ProcessPool(where, process_handlers.hang_first, processes=2, prefetch=1,
                                queue_options={"session_timeout": LEASE})
    killed: list[int] = []

    def kill_the_hung_one() -> None:
        hung = os.path.join(directory, "hung")
        wait_until(lambda: os.path.exists(hung), 60, "a worker process hangs in item 0")
        with open(hung) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_the_hung_one)
    killer.start()
    try:
        stats = pool.run_until_empty()
    finally:
        killer.join()
    assert pool.restarts == 1
    done = collections.defaultdict(list)
    for what, n, pid in lines(directory):
        if what == "done":
            done[n].append(pid)
    assert sorted(done) == list(range(10)), "every item was handled"
    assert killed[0] not in done[0], "item 0 was finished by another process"
    for n, pids in done.items():
        if len(pids) > 1:  # again only if the killed process handled it and had not acked
            assert killed[0] in pids, (n, pids)
    assert stats.done >= 10 - sum(killed[0] in pids for pids in done.values())
    with ackqueue.AckQueue(where, shared=True) as q:
        assert (q.qsize(), q.unacked_count()) == (0, 0)


RUN_POOL = """
import logging, sys, process_handlers, ackqueue
if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    pool = ackqueue.ProcessPool(sys.argv[1], process_handlers.until_released, processes=2,
                                prefetch=1, queue_options={"session_timeout": 2.0})
    stats = pool.run()
    print(stats.done, stats.stopped_by, flush=True)
    sys.exit(stats.exit_code)
"""


def test_sigterm_stops_gracefully_running_handlers_finish_and_the_rest_stays(
    tmp_path: Any,
) -> None:
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 10)
    script = tmp_path / "run_pool.py"
    script.write_text(RUN_POOL)
    env = child_env(PYTHONPATH=os.pathsep.join([os.path.dirname(process_handlers.__file__),
                                                child_env()["PYTHONPATH"]]))
    parent = subprocess.Popen([sys.executable, str(script), where], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len([1 for what, _, _ in lines(directory) if what == "started"]) == 2,
                   60, "both worker processes run a handler")
        parent.send_signal(signal.SIGTERM)
        # Each worker process logs that it waits for its running handler (to the stderr it
        # shares with the parent): only then may the handlers finish, or they would take the
        # next items.
        assert parent.stderr is not None
        told = 0
        for line in parent.stderr:
            told += "stopping: waiting up to" in line
            if told == 2:
                break
        open(os.path.join(directory, "release"), "w").close()
        out, _ = parent.communicate(timeout=120)
    finally:
        parent.kill()
        parent.wait()
    assert parent.returncode == 128 + signal.SIGTERM
    assert out.split() == ["2", "SIGTERM"]
    started = {n for what, n, _ in lines(directory) if what == "started"}
    finished = {n for what, n, _ in lines(directory) if what == "done"}
    assert started == finished and len(finished) == 2
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        settled(q, ready=8, held=0)


def test_what_cannot_reach_worker_processes_is_refused_before_any_starts(tmp_path) -> None:
    where = str(tmp_path / "q.fs")
    with pytest.raises(TypeError, match="top level of an importable module"):
        ackqueue.ProcessPool(where, lambda item: None)
    with pytest.raises(ValueError, match="path of a queue file or a storage URI"):
        ackqueue.ProcessPool(None, process_handlers.burn)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one process"):
        ackqueue.ProcessPool(where, process_handlers.burn, processes=0)
    with pytest.raises(ValueError, match="shared=True"):
        ackqueue.ProcessPool(where, process_handlers.burn, queue_options={"shared": False})
    assert not os.path.exists(where)


def test_a_worker_process_killed_while_it_starts_is_replaced_not_an_error(tmp_path: Any) -> None:
    """Issue 21, item 15: a SIGKILL before the worker process opened the queue is a death like
    any other (it is restarted), not "its error is above" (there is none)."""
    from ackqueue.workers import child

    where = str(tmp_path / "q.fs")
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        q.put_many([{"work": 10} for _ in range(10)])
    pool = ackqueue.ProcessPool(where, process_handlers.burn, processes=1, prefetch=1,
                                queue_options={"session_timeout": LEASE})
    killed_unopened: list[bool] = []

    def kill_the_first_while_it_starts() -> None:
        wait_until(lambda: pool._workers, 60, "a worker process to start")
        worker = pool._workers[0]
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.join(30)
        killed_unopened.append(not worker.counts[child.OPENED])

    killer = threading.Thread(target=kill_the_first_while_it_starts)
    killer.start()
    try:
        stats = pool.run_until_empty()
    finally:
        killer.join()
    assert killed_unopened == [True]  # a spawned process imports for far longer than this
    assert pool.restarts == 1
    assert (stats.done, stats.failed, stats.stopped_by) == (10, 0, None)
    with ackqueue.AckQueue(where, shared=True) as q:
        assert (q.qsize(), q.unacked_count()) == (0, 0)


def test_a_signal_after_the_worker_processes_ended_on_their_own_is_still_reported(
    tmp_path: Any,
) -> None:
    """The worker processes found the queue drained and ended; Ctrl-C reaches the pool while
    it watches the queue settle, after the supervisor's last look (``poll`` is long here).
    The run still reports the signal (exit code 130), as WorkerPool's does."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 3, processes=1)
    pool = ackqueue.ProcessPool(where, process_handlers.together, processes=1, poll=2.0)
    sent = threading.Event()

    def interrupt_once_the_workers_are_gone() -> None:
        wait_until(lambda: pool._workers, 60, "the worker process started")
        wait_until(lambda: not pool._workers, 60, "the worker process ended")
        time.sleep(0.3)  # into the settling's sleep: the supervisor looks again only after it
        sent.set()
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_once_the_workers_are_gone, daemon=True)
    interrupter.start()
    stats = pool.run_until_empty()
    interrupter.join(10)
    assert sent.is_set()
    assert (stats.done, stats.stopped_by, stats.exit_code) == (3, "SIGINT", 130)


def test_ctrl_c_while_a_worker_process_opens_the_queue_stops_the_pool_not_an_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool passes SIGINT on to a worker process that has no handler yet: it ends with
    KeyboardInterrupt (exit code 1) before it opened the queue, which the pool took for a
    broken setup (WorkerProcessError, "must be importable") instead of the stop asked for."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 5, processes=1)
    monkeypatch.setenv("ACKQUEUE_TEST_FLAG", str(tmp_path / "flag"))
    monkeypatch.setenv("ACKQUEUE_TEST_POOL_PID", str(os.getpid()))
    pool = ackqueue.ProcessPool(where, process_handlers.together, processes=2,
                                kind=process_handlers.SigintWhileOpening)
    stats = pool.run()
    assert (stats.stopped_by, stats.exit_code) == ("SIGINT", 130)
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        assert q.qsize() + stats.done == 5  # nothing lost; what was not done is still there


def test_a_worker_process_stopped_by_an_error_stops_the_whole_pool(tmp_path: Any) -> None:
    """A handler's SystemExit ends the only thread of its worker process, whose pool ends by
    an error: the pool stops the other worker processes and run() returns "error". (It noted
    the error and went on waiting for them, and a later stop() was ignored: run() hung.)"""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 1, die=True)
    pool = ackqueue.ProcessPool(where, pool_process_handlers.exit_once, processes=2,
                                stop_timeout=2, queue_options={"session_timeout": LEASE})
    returned: list[ackqueue.PoolStats] = []
    runner = threading.Thread(target=lambda: returned.append(pool.run()))
    runner.start()
    try:
        runner.join(30)
        assert returned, "run() returned once a worker process ended by an error"
    finally:
        if runner.is_alive():
            for worker in pool._workers:
                worker.process.kill()
            runner.join(60)
    assert (returned[0].stopped_by, returned[0].exit_code) == ("error", 1)
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        assert q.qsize() + returned[0].done == 1  # the item went back, or was done


def test_a_poison_item_that_kills_its_worker_process_is_the_only_dead_letter(
    tmp_path: Any,
) -> None:
    """With ``max_attempts``, a delivery counts when an item is prefetched: each process the
    poison item killed spent an attempt of every item it had read ahead (32 by default), and
    innocent items went to the dead letters with it. A worker process now reads ahead one
    item a thread on such a queue."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    options = {"session_timeout": 1.5, "max_attempts": 2}
    with ackqueue.AckQueue(where, shared=True, **options) as q:
        q.put({"n": -1, "dir": directory, "poison": True})
        q.put_many([{"n": n, "dir": directory} for n in range(20)])
    pool = ackqueue.ProcessPool(where, pool_process_handlers.kill_on_poison, processes=2,
                                queue_options=options)
    stats = pool.run_until_empty()
    assert {n for what, n, _ in lines(directory) if what == "done"} == set(range(20))
    with ackqueue.AckQueue(where, shared=True, **options) as q:
        assert [letter.item["n"] for letter in q.dead_letters()] == [-1]
        assert (q.qsize(), q.unacked_count()) == (0, 0)
    assert pool.restarts == 2
    # Buried by the queue at the get after its last attempt, not by a pool: dead all the same.
    assert (stats.done, stats.failed, stats.dead) == (20, 0, 1)


def test_poll_and_stop_timeout_reach_each_worker_process_pool(tmp_path: Any) -> None:
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 1)
    ackqueue.ProcessPool(where, pool_process_handlers.report_options, processes=1, poll=0.05,
                         stop_timeout=7, queue_options={"session_timeout": LEASE}
                         ).run_until_empty()
    with open(os.path.join(directory, "options")) as f:
        assert json.load(f) == {"poll": 0.05, "prefetch": 32, "stop_timeout": 7}


def test_run_until_empty_waits_for_items_their_group_holds_back(tmp_path: Any) -> None:
    """``qsize()`` leaves out the items of a group within its ``group_interval``: the pool
    took the queue for drained with the group's second item still waiting its turn."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    options = {"session_timeout": LEASE, "max_held_per_group": 1, "group_interval": 1.5}
    with ackqueue.AckQueue(where, shared=True, **options) as q:
        q.put_many([{"n": n, "dir": directory, "processes": 1} for n in range(2)],
                   group="host")
    stats = ackqueue.ProcessPool(where, process_handlers.together, processes=1,
                                 queue_options=options).run_until_empty()
    assert (stats.done, stats.stopped_by) == (2, None)
    with ackqueue.AckQueue(where, shared=True, **options) as q:
        assert (q.qsize(), q._ready_total(), q.unacked_count()) == (0, 0, 0)


def test_an_item_the_queue_buries_at_a_worker_processs_get_counts_as_dead(tmp_path: Any) -> None:
    """An item whose attempts earlier runs spent goes to the dead letters at a worker
    process's get, buried by the queue: the merged stats said dead=0."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    options = {"session_timeout": LEASE, "max_attempts": 1}
    with ackqueue.AckQueue(where, shared=True, **options) as q:
        q.put({"n": -1, "dir": directory})
        with q.connect() as c:
            c.get_nowait()  # its only attempt, never acked
        q.put_many([{"n": n, "dir": directory} for n in range(3)])
    stats = ackqueue.ProcessPool(where, pool_process_handlers.kill_on_poison, processes=1,
                                 queue_options=options).run_until_empty()
    assert (stats.done, stats.failed, stats.dead, stats.stopped_by) == (3, 0, 1, None)
    with ackqueue.AckQueue(where, shared=True, **options) as q:
        assert [letter.item["n"] for letter in q.dead_letters()] == [-1]


def test_an_item_that_cannot_be_loaded_goes_to_the_dead_letters_and_the_worker_process_goes_on(
    tmp_path: Any, vanishing_class: Any
) -> None:
    """The queue buries an item whose class is gone at a worker process's get, which raises
    ItemLoadError: the worker process's feeder took that for its own failure, its pool ended
    by an error, and so did the whole pool, items left unhandled."""
    module, remove = vanishing_class
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        for n in range(6):
            if n % 2 == 0:
                q.put(module.Gone())
            q.put({"n": n, "dir": directory})
    remove()
    stats = ackqueue.ProcessPool(where, pool_process_handlers.kill_on_poison, processes=1,
                                 prefetch=1, queue_options={"session_timeout": LEASE}
                                 ).run_until_empty()
    assert (stats.stopped_by, stats.done, stats.failed, stats.dead) == (None, 6, 0, 3)
    assert sorted(n for what, n, _ in lines(directory) if what == "done") == list(range(6))
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        assert (q.qsize(), q.unacked_count(), q.dead_count()) == (0, 0, 3)


def test_a_stop_before_run_ends_the_next_run_at_once_and_the_pool_runs_again_after(
    tmp_path: Any,
) -> None:
    """As WorkerPool's and AsyncWorkerPool's: a stop() while no run is under way is for the
    next run. The run cleared it as it started, and worked the whole queue."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    fill(where, directory, 5)
    pool = ackqueue.ProcessPool(where, pool_process_handlers.kill_on_poison, processes=1,
                                queue_options={"session_timeout": LEASE})
    pool.stop()
    stats = pool.run_until_empty()
    assert (stats.stopped_by, stats.done, stats.exit_code) == ("stop()", 0, 0)
    assert lines(directory) == []  # no handler ran
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        assert (q.qsize(), q.unacked_count()) == (5, 0)
    stats = pool.run_until_empty()  # the stop was for one run only
    assert (stats.stopped_by, stats.done) == (None, 5)
    assert sorted(n for what, n, _ in lines(directory) if what == "done") == list(range(5))


def test_the_finished_line_counts_as_ready_what_a_groups_rules_hold_back(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``qsize()`` leaves out the items of a paused group; the pool counts them as ready
    everywhere else (``_ready_total``), and now in its finished line too."""
    where, directory = str(tmp_path / "q.fs"), str(tmp_path)
    with ackqueue.AckQueue(where, shared=True, session_timeout=LEASE) as q:
        q.put_many([{"n": n, "dir": directory} for n in range(2)], group="paused")
        q.pause_group("paused", 60)
    pool = ackqueue.ProcessPool(where, pool_process_handlers.kill_on_poison, processes=1,
                                queue_options={"session_timeout": LEASE})
    returned: list[ackqueue.PoolStats] = []
    with caplog.at_level(logging.INFO, logger="ackqueue"):
        runner = threading.Thread(target=lambda: returned.append(pool.run()))
        runner.start()
        try:
            wait_until(lambda: any(w.counts[child.OPENED] for w in pool._workers), 30,
                       "the worker process opening the queue")
        finally:
            pool.stop()
            runner.join(60)
    assert returned and returned[0].stopped_by == "stop()"
    [line] = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith("process pool finished:")]
    assert "queue: 2 ready, 0 held" in line, line
