"""A pool of worker processes over one queue, for handlers that need a CPU each.

:class:`ProcessPool` starts ``processes`` fresh interpreters (``spawn``); each opens the queue
with ``shared=True`` and runs a :class:`~ackqueue.workers.pool.WorkerPool` of ``threads`` threads
on it (``workers/child.py``). This process supervises: it merges their counts, passes SIGINT
and SIGTERM on to them (a graceful stop, as for one pool; a second Ctrl-C stops at once), and
replaces a worker process that died (SIGKILL, a crash in a C extension, the OOM killer). What a
dead worker held goes back to the queue when its session lease (``session_timeout``) lapses,
as for any process in shared mode; what it acked stays acked.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, MutableSequence
from dataclasses import replace
from types import FrameType
from typing import Any

from ackqueue.errors import WorkerProcessError
from ackqueue.queue.queues import AckQueue
from ackqueue.workers import child
from ackqueue.workers.options import check_count, check_pool_arguments, check_pool_options
from ackqueue.workers.pool import Handler, PoolStats, Retry

log = logging.getLogger("ackqueue")

# Seconds past ``stop_timeout`` a stopping worker process has to exit before it is killed
# (its items then go back by lease).
EXIT_GRACE = 30.0
# Seconds this process's view of the queue must show it empty before run_until_empty ends
# (other processes' last commits reach it within the session watcher's poll).
SETTLE = 1.0
# Worker processes killed by a signal before opening the queue, in a row, that stop the pool
# (each is restarted until then: one SIGKILLed while it starts is a death like any other).
MAX_KILLED_UNOPENED = 5


class _Worker:
    """One worker process and the counts it publishes."""

    def __init__(self, process: Any, counts: MutableSequence[int]) -> None:
        self.process = process
        self.counts = counts


class ProcessPool:
    """``processes`` worker processes, each running ``handler(item)`` in ``threads`` threads
    for the items of the queue at ``where`` (a file path or a storage URI; each process opens
    it with ``kind(where, shared=True, name=name, **queue_options)``: ``name`` picks the
    named queue). ``processes`` defaults to the number of CPUs. ``retry``, ``prefetch``,
    ``stop_timeout`` and ``poll`` are each process's :class:`~ackqueue.WorkerPool` options
    (``poll`` is also how often this process looks at them); ``log_interval`` is how often
    this process logs their merged progress (they log none of their own).

    ``prefetch`` defaults to the WorkerPool's, except with a queue that has ``max_attempts``
    (in ``queue_options``), where it is ``threads``: a delivery counts when an item is
    prefetched, so a handler that kills its process (``os._exit``, a crash in a C extension)
    would otherwise spend an attempt of every item that process had read ahead, and a
    poison item killing it ``max_attempts`` times would send innocent items to the dead
    letters with it. That costs a get (one commit) for about every item rather than one for
    many; a ``prefetch`` given is used as it is, that risk included.

    The handler must be picklable by reference, since it is sent to fresh interpreters: a
    function defined at the top level of an importable module (or of the main script, when
    the script starts the pool under ``if __name__ == "__main__":``), not a lambda or a
    nested function; so must ``kind`` and anything in ``queue_options``. Each process imports
    the handler's module anew: state a handler keeps in globals is per process.

    ``run()`` works until :meth:`stop`, SIGINT or SIGTERM (when called from the main thread)
    or the queue is shut down and drained; ``run_until_empty()`` returns once every process
    found the queue empty with nothing held. A :meth:`stop` while no run is under way stops
    the next one, which returns at once (no worker process starts); a pool can be run again
    after a run ends. Both return the merged :class:`PoolStats` of that run alone.
    ``restarts`` counts the worker processes that died and were replaced. A worker process
    whose pool ended by an error (every thread ended by a ``BaseException`` from the handler,
    such as ``SystemExit``, or its feeder failed) stops the whole pool: the other worker
    processes stop gracefully, as on SIGTERM, and the run's ``stopped_by`` is ``"error"``
    (exit code 1). A worker process that fails before it has opened the queue stops the
    pool with :class:`~ackqueue.WorkerProcessError`.
    """

    def __init__(
        self,
        where: str | os.PathLike[str],
        handler: Handler,
        processes: int | None = None,
        threads: int = 1,
        retry: Retry | None = None,
        *,
        kind: type[AckQueue[Any]] = AckQueue,
        name: str = "default",
        queue_options: dict[str, Any] | None = None,
        prefetch: int | None = None,
        stop_timeout: float = 30.0,
        log_interval: float = 10.0,
        poll: float = 0.2,
    ) -> None:
        if where is None or not isinstance(where, (str, os.PathLike)):
            raise ValueError(
                f"a ProcessPool needs the path of a queue file or a storage URI, which every "
                f"process opens; got {where!r} (an in-memory queue or a caller's db= lives in "
                "one process: use WorkerPool there)"
            )
        processes = (os.cpu_count() or 1) if processes is None else processes
        check_pool_arguments(handler, "processes", processes, "process", retry)
        check_count("threads", threads, "thread a process")
        if not (isinstance(kind, type) and issubclass(kind, AckQueue)):
            raise TypeError(f"kind must be AckQueue or a subclass of it, not {kind!r}")
        check_pool_options(prefetch, stop_timeout, poll, log_interval)
        options = dict(queue_options or {})
        for reserved in ("shared", "name", "db"):
            if reserved in options:
                raise ValueError(
                    f"queue_options may not set {reserved!r}: a ProcessPool opens the queue with "
                    "shared=True, its own name= argument, and a path or URI"
                )
        # The worker processes log no progress: this one logs theirs, merged.
        self.job = child.Job(os.fspath(where), kind, name, options, handler, threads, retry,
                             prefetch, stop_timeout, math.inf, poll, until_empty=False)
        _check_picklable(self.job)
        self.processes = processes
        self.log_interval = log_interval
        self.poll = poll
        self.restarts = 0
        self._last_death = -math.inf
        self.stats = PoolStats()
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._ended: list[_Worker] = []
        self._stopped_by: str | None = None
        self._signals: list[int] = []  # received by the handler, passed on by _supervise
        self._asked_to_stop = threading.Event()

    # -- running -------------------------------------------------------------------------------

    def run(self) -> PoolStats:
        """Work until stopped (:meth:`stop`, SIGINT, SIGTERM) or the queue is shut down and
        drained; the merged counts."""
        return self._run(until_empty=False)

    def run_until_empty(self) -> PoolStats:
        """Work until the queue is drained: every worker process found nothing ready and
        nothing of its own held, the items of worker processes that died came back (their
        sessions lapsed) and were worked too, and this process sees nothing ready, nor held
        back by its group's rules (those are waited for)."""
        return self._run(until_empty=True)

    def stop(self) -> None:
        """Ask every worker process to stop: no new items; running handlers finish. Called
        while no run is under way, it stops the next run, which returns at once."""
        self._asked_to_stop.set()

    def _run(self, until_empty: bool) -> PoolStats:
        job = self.job = replace(self.job, until_empty=until_empty,
                                 log_level=log.getEffectiveLevel())
        # Opened here first: a path that cannot be shared fails now, with its own error, not
        # in N processes; and a file's server is started once.
        queue = job.kind(job.where, shared=True, name=job.name, **job.options)
        self.stats, self._stopped_by, self._workers, self._ended = PoolStats(), None, [], []
        self.restarts, self._last_death = 0, -math.inf
        self._killed_unopened = 0  # worker processes killed by a signal before opening, in a row
        self._signals.clear()
        restore = self._install_signal_handlers()
        started = time.monotonic()
        try:
            # A stop() asked since the last run ended is for this one: no process starts.
            self._pass_on_signals()
            while self._stopped_by is None:
                for _ in range(self.processes):
                    self._start()
                self._supervise(started)
                if not until_empty or self._stopped_by is not None or self._drained(queue):
                    break
                log.info("process pool: items are left in the queue (given back late, or "
                         "back from a lapsed session); starting the worker processes again")
        finally:
            restore()
            # A signal that came after the supervisor's last look (the worker processes had
            # ended on their own) still ends the run as interrupted, as WorkerPool's does.
            self._pass_on_signals()
            self._end_all()
            # Ready as the pool judges it everywhere: items their group's rules hold back too.
            queue_counts = (queue._ready_total(), queue.unacked_count())
            queue.close()
            # From here a stop() is for the next run.
            self._asked_to_stop.clear()
        self._merge()
        log.info("process pool finished: %d done, %d failed, %d dead, %d restarts; queue: %d "
                 "ready, %d held", self.stats.done, self.stats.failed, self.stats.dead,
                 self.restarts, *queue_counts)
        return self.stats

    def _start(self) -> None:
        counts = self._context.Array("q", child.SLOTS, lock=False)
        process = self._context.Process(target=child.main, args=(self.job, counts, os.getpid()),
                                        name="ackqueue-worker", daemon=False)
        process.start()
        self._workers.append(_Worker(process, counts))

    def _supervise(self, started: float) -> None:
        next_log = started + self.log_interval
        while self._workers:
            self._pass_on_signals()
            sentinels = [worker.process.sentinel for worker in self._workers]
            multiprocessing.connection.wait(sentinels, timeout=self.poll)
            for worker in [w for w in self._workers if not w.process.is_alive()]:
                self._workers.remove(worker)
                self._ended.append(worker)
                self._on_exit(worker)
            if time.monotonic() >= next_log:
                next_log += self.log_interval
                self._merge()
                log.info("process pool: %d processes, %d done, %d failed, %d dead",
                         len(self._workers), self.stats.done, self.stats.failed,
                         self.stats.dead)

    def _drained(self, queue: AckQueue[Any]) -> bool:
        """Whether the queue is drained, now that every worker process found it so.

        Each worker process judges from its own view: ready items it has not seen yet
        (another process gave them back a moment ago) and items held by a worker process that
        died (back only when its session lapses) escape it. So wait until the session of the
        last process that died has lapsed, then watch this process's view of the queue
        settle for ``SETTLE`` seconds. Items their group's rules hold back now (within the
        group's ``group_interval``, at its cap, paused), which ``qsize()`` leaves out, are not
        drained: wait until they may be delivered (or a stop).
        """
        lapsed = self._last_death + self._session_timeout() + SETTLE
        deadline = max(lapsed, time.monotonic()) + SETTLE
        told = False
        while True:
            self._pass_on_signals()
            if self._stopped_by is not None:
                return True
            now = time.monotonic()
            if now > lapsed and queue.qsize() > 0:
                return False
            if now >= deadline:
                held_back = queue._ready_total()
                if not held_back:
                    return True
                if not told:
                    told = True
                    log.info("process pool: %d items wait for their group's turn (paused, at "
                             "max_held_per_group or within group_interval)", held_back)
            time.sleep(self.poll)  # polling the view with a deadline

    def _session_timeout(self) -> float:
        given = self.job.options.get("session_timeout")
        if given is None:
            given = inspect.signature(self.job.kind).parameters["session_timeout"].default
        return float(given)

    def _on_exit(self, worker: _Worker) -> None:
        code = worker.process.exitcode
        ended = worker.counts[child.ENDED]
        if not worker.counts[child.OPENED] and self._stopped_by is None:
            # Killed by a signal while it started (SIGKILL, the OOM killer): a death like any
            # other, unless it keeps happening to every new process before any opens. (Once
            # the pool is stopping, a process still starting may end on the signal the pool
            # passed on before it had a handler: Ctrl-C's KeyboardInterrupt, exit code 1.)
            killed = code is not None and code < 0
            self._killed_unopened = self._killed_unopened + 1 if killed else 0
            if not killed or self._killed_unopened > MAX_KILLED_UNOPENED:
                self._stop_all("error")
                raise WorkerProcessError(self._unopened_error(code, killed))
        else:
            self._killed_unopened = 0
        if ended == child.FAILED_RUN and self._stopped_by is None:
            log.error("worker process %d stopped by an error (logged above); stopping the pool",
                      worker.process.pid)
            self._stop_all("error")
        if code == 0 or self._stopped_by is not None:
            return
        # Died without finishing (SIGKILL, a crash): its items come back by lease; replace it.
        self.restarts += 1
        self._last_death = time.monotonic()
        log.warning("worker process %d died (exit code %s); starting another; its held items "
                    "go back to the queue when its session lapses", worker.process.pid, code)
        self._start()

    def _unopened_error(self, code: int | None, killed: bool) -> str:
        if killed:
            return (
                f"{self._killed_unopened} worker processes in a row were killed by a signal "
                f"(the last: {signal.Signals(-code).name if code else code}) before they "
                f"opened the queue {self.job.where}; stopping the pool"
            )
        return (
            f"a worker process exited with code {code} before it opened the queue "
            f"{self.job.where}; its error is above. The handler and queue options must be "
            "importable in a fresh interpreter, and a script that starts a ProcessPool "
            "must do so under `if __name__ == \"__main__\":`"
        )

    # -- stopping and signals ------------------------------------------------------------------

    def _pass_on_signals(self) -> None:
        if self._asked_to_stop.is_set() and self._stopped_by is None:
            self._stop_all("stop()")
        while self._signals:
            signum = self._signals.pop(0)
            if self._stopped_by is None or self._stopped_by == "error":
                self._stopped_by = signal.Signals(signum).name
            self._signal_all(signum)

    def _stop_all(self, by: str) -> None:
        if self._stopped_by is None:
            self._stopped_by = by
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, signum: int) -> None:
        for worker in self._workers:
            with contextlib.suppress(ProcessLookupError):  # it has just ended
                os.kill(worker.process.pid, signum)

    def _end_all(self) -> None:
        """Let every worker process still running stop gracefully, then kill any that does not
        within ``stop_timeout`` and a grace (its items go back by lease)."""
        if not self._workers:
            return
        self._stop_all(self._stopped_by or "error")
        deadline = time.monotonic() + self.job.stop_timeout + EXIT_GRACE
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                log.warning("worker process %d did not stop in time: killed",
                            worker.process.pid)
                worker.process.kill()
                worker.process.join()
            self._ended.append(worker)
        self._workers = []

    def _merge(self) -> None:
        everyone = self._ended + self._workers
        self.stats.done = sum(w.counts[child.DONE] for w in everyone)
        self.stats.failed = sum(w.counts[child.FAILED] for w in everyone)
        self.stats.dead = sum(w.counts[child.DEAD] for w in everyone)
        self.stats.stopped_by = self._stopped_by

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGINT, signal.SIGTERM)}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only noted here (a signal handler may run while this thread holds a lock); the
        # supervisor passes it on within ``poll``.
        self._signals.append(signum)


def _check_picklable(job: child.Job) -> None:
    for what, value in (("handler", job.handler), ("kind", job.kind),
                        ("queue_options", job.options), ("retry", job.retry)):
        try:
            pickle.dumps(value)
        except Exception as exc:
            raise TypeError(
                f"the {what} {value!r} cannot be sent to worker processes ({exc}); a handler "
                "must be a function defined at the top level of an importable module (not a "
                "lambda, a nested function or a method of an object that cannot be pickled)"
            ) from exc
