"""``python -m ackqueue demo``: a short tour that tells what happens as it happens."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from ackqueue.cli.inspection import QueueFile
from ackqueue.queue.queues import AckQueue
from ackqueue.workers.pool import Retry, WorkerPool

CRASH_CHILD = """
import os, sys
from ackqueue.queue.queues import AckQueue
q = AckQueue(sys.argv[1])
c = q.connect()
job = c.get()
print(job, flush=True)
os.kill(os.getpid(), 9)   # die without acking, like a power cut would
"""


def run_demo(say: Callable[[str], None] = print) -> int:
    with tempfile.TemporaryDirectory(prefix="ackqueue-demo-") as tmp:
        path = os.path.join(tmp, "jobs.fs")
        say(f"1. A durable queue in {path}; a producer puts 6 jobs.")
        q: AckQueue[str] = AckQueue(path)
        for n in range(1, 7):
            q.put(f"job-{n}")
        say(f"   ready: {q.qsize()}, held: {q.unacked_count()}")

        say("2. A worker thread gets job-1 and dies of an exception before acking it.")
        got: list[str] = []

        def doomed_worker() -> None:
            c = q.connect()
            got.append(c.get())
            raise RuntimeError("worker crashed mid-job")

        thread = threading.Thread(target=doomed_worker, name="doomed-worker")
        old_hook = threading.excepthook
        threading.excepthook = lambda args: None  # the crash is the point; keep the tour tidy
        thread.start()
        thread.join()
        threading.excepthook = old_hook
        say(f"   it got {got[0]!r}; after its death ready: {q.qsize()}, held: {q.unacked_count()}")

        say("3. Three healthy workers process and ack three jobs; job-1 comes back first.")
        done: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            with q.connect() as c:
                job = c.get(timeout=5)
                with lock:
                    done.append(job)
                c.ack(job)

        workers = [threading.Thread(target=worker) for _ in range(3)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        say(f"   done: {sorted(done)}; ready: {q.qsize()}")
        q.close()

        say("4. Another process gets the next job and is killed with SIGKILL before acking.")
        child = subprocess.run(
            [sys.executable, "-c", CRASH_CHILD, path], capture_output=True, text=True, timeout=60
        )
        say(f"   it got {child.stdout.strip()!r} and died (exit status {child.returncode}).")

        say("5. The queue is opened again: nothing was lost.")
        with AckQueue[str](path) as q:
            left = []
            with q.connect() as c:
                while not q.empty():
                    job = c.get()
                    left.append(job)
                    c.ack(job)
        say(f"   remaining jobs, in order: {left}")
        ok = sorted(done + left) == [f"job-{n}" for n in range(1, 7)]
        say("   Every job was done, and none was lost on the way." if ok else "   LOST!")
        ok = _poison_step(path, say) and ok
        _stats_step(path, say)
        return 0 if ok else 1


def _poison_step(path: str, say: Callable[[str], None]) -> bool:
    say("6. A poison job fails every time: a WorkerPool retries it with backoff, then gives up.")

    def handler(job: str) -> None:
        if job == "poison":
            raise ValueError("cannot parse this job")

    quiet = logging.NullHandler()  # the pool's retry warnings would clutter the story
    logger = logging.getLogger("ackqueue")
    logger.addHandler(quiet)
    propagate, logger.propagate = logger.propagate, False
    try:
        opener: Any = AckQueue  # Any: max_attempts= arrives with dead letters
        with opener(path, max_attempts=3) as q:
            q.put("poison")
            q.put("job-7")
            stats = WorkerPool(q, handler, threads=2, retry=Retry(base=0.02)).run_until_empty()
            dead = q.dead_letters()
    finally:
        logger.removeHandler(quiet)
        logger.propagate = propagate
    say(f"   done: {stats.done}; failed attempts: {stats.failed}; dead letters: "
        + ", ".join(f"{d.item!r} after {d.attempts} attempts ({d.reason})" for d in dead))
    return [d.item for d in dead] == ["poison"] and stats.done == 1


def _stats_step(path: str, say: Callable[[str], None]) -> None:
    with QueueFile(path) as qf:
        s = qf.stats("default")
    say(f"7. `ackqueue stats {os.path.basename(path)}` would now say: ready {s.ready}, "
        f"held {s.held}, delayed {s.delayed}, dead {s.dead}.")
