"""``ackqueue bench``: jobs per second and latency on this machine, on a queue of its own.

It fills a new queue file with ``-n`` items (``put_many``), burns them down with a
:class:`~ackqueue.workers.pool.WorkerPool` of ``--threads`` threads and a handler that does
nothing (every ack durable before a job counts as done), then measures latency under load:
4 producer threads ``put`` while 4 consumer threads ``get`` and ``ack`` one item at a time.
It never opens an existing file: given a PATH that exists it refuses; without PATH it works in
a temporary directory. Either way it removes the files it made, unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import ackqueue
from ackqueue.cli.common import Progress
from ackqueue.queue.queues import AckQueue
from ackqueue.workers.pool import WorkerPool

FILL_BATCH = 1000
ITEM_SIZE = 100
LATENCY_THREADS = 4  # producers, and as many consumers


def item(i: int) -> bytes:
    """The i-th benchmark item: 100 distinct bytes."""
    head = b"item-%012d-" % i
    return head + b"x" * (ITEM_SIZE - len(head))


# -- the machine ---------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fs_type(directory: str) -> str:
    """The file system type of ``directory`` (Linux: the longest matching mount point)."""
    path = os.path.realpath(directory)
    best, kind = "", "unknown"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                mount = fields[4].replace("\\040", " ")
                fstype = fields[fields.index("-") + 1]
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, fstype
    except (OSError, ValueError, IndexError):
        pass
    return kind


def machine(directory: str) -> list[str]:
    """Lines saying what this ran on."""
    return [
        f"machine: {platform.system()} {platform.release()}, {os.cpu_count()} CPUs "
        f"({cpu_model()})",
        f"python: {platform.python_implementation()} {platform.python_version()}; "
        f"ackqueue {ackqueue.__version__}",
        f"queue file in: {directory} ({fs_type(directory)})",
    ]


# -- latency -------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values``, nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass
class Latencies:
    """Seconds from ``put`` returning to the ``get`` returning it, and from that ``get``
    returning to its ``ack`` returning (durable), one pair per item; and items per second."""

    put_to_get: list[float] = field(default_factory=list)
    get_to_ack: list[float] = field(default_factory=list)
    rate: float = 0.0

    def summary(self) -> str:
        def ms(values: list[float], p: float) -> str:
            return f"{percentile(values, p) * 1000:.2f}"

        return (
            f"put->get p50 {ms(self.put_to_get, 50)} ms, p99 {ms(self.put_to_get, 99)} ms; "
            f"get->durable ack p50 {ms(self.get_to_ack, 50)} ms, "
            f"p99 {ms(self.get_to_ack, 99)} ms"
        )


Getter = Callable[[float], Any]  # get(timeout) -> item, raises on timeout
Acker = Callable[[Any], object]


def measure_latency(
    n: int,
    put: Callable[[Any], object],
    make_consumer: Callable[[], tuple[Getter, Acker]],
    empty: tuple[type[BaseException], ...] = (queue.Empty,),
    threads: int = LATENCY_THREADS,
) -> Latencies:
    """``threads`` producers put ``n`` items while ``threads`` consumers get and ack them.

    ``make_consumer`` runs in each consumer thread and returns its ``get(timeout)`` and
    ``ack(item)``. Items are ints, so that every implementation can carry them.
    """
    put_done: dict[int, float] = {}
    got_at: dict[int, float] = {}
    acked_at: dict[int, float] = {}
    all_acked = threading.Event()
    clock = time.perf_counter

    def produce(k: int) -> None:
        for i in range(k, n, threads):
            put(i)
            put_done[i] = clock()

    def consume() -> None:
        get, ack = make_consumer()
        while not all_acked.is_set():
            try:
                x = get(0.05)
            except empty:
                continue
            got = clock()
            ack(x)
            got_at[x], acked_at[x] = got, clock()
            if len(acked_at) == n:
                all_acked.set()

    workers = [threading.Thread(target=consume) for _ in range(threads)]
    workers += [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
    start = clock()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = max(acked_at.values()) - start
    return Latencies(
        # A consumer may see an item a moment before its put() returned: count that as 0.
        put_to_get=[max(0.0, got_at[i] - put_done[i]) for i in range(n)],
        get_to_ack=[acked_at[i] - got_at[i] for i in range(n)],
        rate=n / elapsed,
    )


def ackqueue_latency(path: str, n: int) -> Latencies:
    """:func:`measure_latency` on the (empty) AckQueue at ``path``."""
    q: AckQueue[int] = AckQueue(path)

    def consumer() -> tuple[Getter, Acker]:
        c = q.connect()
        return (lambda timeout: c.get(timeout=timeout)), c.ack

    try:
        return measure_latency(n, q.put, consumer)
    finally:
        q.close()


# -- fill and drain --------------------------------------------------------------------------------


def fill(q: AckQueue[Any], n: int, out: Callable[[str], None]) -> float:
    """Put ``n`` items with ``put_many``; items per second."""
    progress = Progress("filling", out=out, rate=True)
    start = time.perf_counter()
    for s in range(0, n, FILL_BATCH):
        q.put_many([item(i) for i in range(s, min(n, s + FILL_BATCH))])
        progress(min(n, s + FILL_BATCH), n)
    return n / (time.perf_counter() - start)


def drain(q: AckQueue[Any], n: int, threads: int, out: Callable[[str], None],
          handler: Callable[[Any], object] = lambda job: None) -> float:
    """Burn the queue down with a WorkerPool; jobs (durably acked) per second."""
    pool = WorkerPool(q, handler, threads=threads, log_interval=3600)
    progress = Progress(f"draining with {threads} threads", out=out, rate=True)
    finished = threading.Event()

    def report() -> None:
        while not finished.wait(progress.interval):
            progress(pool.stats.done, n)

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    start = time.perf_counter()
    try:
        stats = pool.run_until_empty()
    finally:
        finished.set()
    elapsed = time.perf_counter() - start
    progress(stats.done, n, final=True)
    if stats.interrupted:
        raise KeyboardInterrupt
    return stats.done / elapsed


# -- the command ---------------------------------------------------------------------------------


@contextmanager
def bench_path(path: str | None, keep: bool) -> Iterator[str]:
    """A path for a new queue file; removes what the benchmark made unless ``keep``."""
    if path is None:
        directory = tempfile.mkdtemp(prefix="ackqueue-bench-")
        try:
            yield os.path.join(directory, "bench.fs")
        finally:
            if not keep:
                shutil.rmtree(directory, ignore_errors=True)
        return
    if os.path.lexists(path):
        raise FileExistsError(
            f"{path} exists; bench only writes a new file of its own, so it never touches a "
            "queue: give a path that does not exist yet, or none for a temporary directory"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no directory {directory} for {path}")
    made = [path + suffix for suffix in ("", ".index", ".lock", ".tmp", ".old", ".pack")]
    try:
        yield path
    finally:
        if not keep:
            for name in made:
                if os.path.lexists(name):
                    os.remove(name)


def run_bench(path: str | None, n: int, threads: int, latency_n: int, keep: bool,
              out: Callable[[str], None], figures: dict[str, Any] | None = None) -> int:
    """Run the benchmark, saying what it does and finds through ``out``; the figures also go
    into ``figures`` (for ``--json``) if given."""
    found: dict[str, Any] = {} if figures is None else figures
    with bench_path(path, keep) as where:
        directory = os.path.dirname(where)
        for line in machine(directory):
            out(line)
        out(f"items: {n:,} of {ITEM_SIZE} bytes; {threads} worker threads; every put and ack "
            "durable (fsync) when it returns")
        out(f"runs: fill {n:,}, drain {n:,}, then latency on {latency_n:,} items; the fill and "
            "the drain say every second how long they have left (-n for a shorter run; Ctrl-C "
            "stops it)")
        q: AckQueue[bytes] = AckQueue(where)
        try:
            filled = fill(q, n, out)
            drained = drain(q, n, threads, out)
        finally:
            q.close()
        out(f"fill (put_many of {FILL_BATCH}): {filled:,.0f} items/s")
        out(f"drain (WorkerPool, {threads} threads, no-op handler): {drained:,.0f} jobs/s")
        out(f"latency under load ({LATENCY_THREADS} producers put, {LATENCY_THREADS} consumers "
            f"get+ack, {latency_n:,} items):")
        lat = ackqueue_latency(where, latency_n)  # the same file, drained by now
        out(f"  {lat.summary()}; {lat.rate:,.0f} items/s")
        found.update(
            machine=machine(directory), items=n, item_bytes=ITEM_SIZE, threads=threads,
            fill_items_per_s=filled, drain_jobs_per_s=drained, latency_items=latency_n,
            latency_items_per_s=lat.rate,
            latency_ms={f"{span}_p{p}": percentile(values, p) * 1000
                        for span, values in (("put_to_get", lat.put_to_get),
                                             ("get_to_ack", lat.get_to_ack))
                        for p in (50, 99)},
        )
        if keep:
            out(f"kept: {where}")
    return 0


def add_command(commands: Any) -> None:
    """Register ``bench`` on the ``ackqueue`` command's subparsers."""
    sub = commands.add_parser(
        "bench", help="jobs/s and latency on this machine, on a new queue of its own",
        description=__doc__.split("\n\n")[0].replace("``", ""),  # --help is plain text
    )
    sub.add_argument("path", metavar="PATH", nargs="?",
                     help="a new queue file to create (must not exist; default: a temp dir)")
    sub.add_argument("-n", type=positive, default=1_000_000, help="items (default 1,000,000)")
    sub.add_argument("--threads", type=positive, default=8, help="worker threads (default 8)")
    sub.add_argument("--latency-n", type=positive, default=None,
                     help="items for the latency phase (default: n, at most 20,000)")
    sub.add_argument("--keep", action="store_true", help="keep the files it made")
    sub.add_argument("--json", action="store_true",
                     help="the figures as one JSON object on stdout (progress on stderr)")
    sub.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    latency_n = args.latency_n if args.latency_n is not None else min(args.n, 20_000)

    def out(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    figures: dict[str, Any] = {}
    code = run_bench(args.path, args.n, args.threads, latency_n, args.keep, out, figures)
    if args.json:
        print(json.dumps(figures, indent=2))
    return code


def positive(text: str) -> int:
    value = int(text.replace(",", "").replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
