"""What packing costs, with ackqueue's packer and with FileStorage's, and what an idle session
writes.

A queue file is packed as garbage builds up (storage/filestorage.py, "Packing" and "Automatic
packing"). This script measures, files in ``--dir`` (default ``/dev/shm``, a tmpfs), process
CPU time (``time.process_time``), medians of ``--runs`` runs with the two packers alternated:

- **one pack**: a file of ``--n`` puts; the same with all but 100 acked; a file of ``10 x --n``
  puts. Each packed once, on a copy, by ``FileStorage(path, packer=...)`` with ZODB's own
  packer (``FileStorage.packer``, fspack) and with ackqueue's (``live_packer``), which writes
  the same bytes from the live records;
- **operations with packing counted**: a queue's puts, then its held gets each acked, ``--n``
  of each, and put + get + ack cycles over a backlog of 100 items; ackqueue with its own packer,
  with FileStorage's packer in its place (the module global ``live_packer`` that ackqueue's
  ``durable_packer`` calls, swapped for the run), and with ``autopack=False`` (no packing);
- **an idle session**: ``with AckQueue(path) as q: q.qsize()`` on a 100-item file, 20 times:
  wall and CPU time each, and the bytes the file grew by.

Run: ``python3 benchmarks/bench_pack.py [--n 3000] [--runs 3] [--dir /dev/shm]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import _common as c
import ZODB
from ZODB.FileStorage import FileStorage

import ackqueue
from ackqueue.storage import filestorage

PACKERS: dict[str, Callable[..., Any]] = {
    "FileStorage's packer": FileStorage.packer,
    "ackqueue's packer": filestorage.live_packer,
}


@contextmanager
def packing_with(packer: Callable[..., Any] | None) -> Iterator[None]:
    """ackqueue's queue files packed by ``packer`` (None: as they come) meanwhile."""
    own = filestorage.live_packer
    if packer is not None:
        filestorage.live_packer = packer  # (what durable_packer calls)
    try:
        yield
    finally:
        filestorage.live_packer = own


def queue_file(path: str, puts: int, acks: int) -> None:
    with ackqueue.AckQueue[Any](path, autopack=False) as q:
        for i in range(puts):
            q.put(c.item(i))
        consumer = q.connect()
        for _ in range(acks):
            consumer.ack(consumer.get_nowait())


def one_pack(source: str, packer: Callable[..., Any], d: str) -> float:
    """ms of CPU for one pack of a copy of ``source`` by ``packer``."""
    copy = os.path.join(d, "copy.fs")
    shutil.copyfile(source, copy)
    if os.path.exists(source + ".index"):
        shutil.copyfile(source + ".index", copy + ".index")
    db = ZODB.DB(FileStorage(copy, packer=packer))
    try:
        start = time.process_time()
        db.pack()
        return (time.process_time() - start) * 1e3
    finally:
        db.close()
        for name in os.listdir(d):
            if name.startswith("copy.fs"):
                os.remove(os.path.join(d, name))


def operations(base: str, n: int, autopack: bool) -> dict[str, float]:
    """CPU us an operation: puts, held get + acks, put + get + ack cycles."""
    items = [c.item(i) for i in range(n)]
    with c.tmpdir(base) as d:
        path = os.path.join(d, "q.fs")
        q = ackqueue.AckQueue[Any](path, autopack=autopack)
        put = c.cpu_us(n, lambda: [q.put(x) for x in items])
        q.close()
        q = ackqueue.AckQueue[Any](path, autopack=autopack)
        consumer = q.connect()

        def get_acks() -> None:
            for _ in range(n):
                consumer.ack(consumer.get_nowait())

        get_ack = c.cpu_us(n, get_acks)
        for x in items[:100]:
            q.put(x)

        def cycles() -> None:
            for x in items:
                q.put(x)
                consumer.ack(consumer.get_nowait())

        cycle = c.cpu_us(n, cycles)
        q.close()
    return {"put": put, "get+ack": get_ack, "put+get+ack, 100 queued": cycle}


def idle_sessions(base: str, sessions: int = 20) -> tuple[float, float, int]:
    """Median wall and CPU ms of an open + qsize + close, and the bytes the file grew by."""
    with c.tmpdir(base) as d:
        path = os.path.join(d, "q.fs")
        queue_file(path, 100, 0)
        before = os.path.getsize(path)
        walls, cpus = [], []
        for _ in range(sessions):
            wall, cpu = time.perf_counter(), time.process_time()
            with ackqueue.AckQueue[Any](path) as q:
                q.qsize()
            walls.append((time.perf_counter() - wall) * 1e3)
            cpus.append((time.process_time() - cpu) * 1e3)
        return c.median(walls), c.median(cpus), os.path.getsize(path) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--n", type=int, default=3000, help="items (default 3000)")
    ap.add_argument("--runs", type=int, default=3, help="runs; medians printed (default 3)")
    ap.add_argument("--dir", default="/dev/shm", help="where the files go (default /dev/shm)")
    args = ap.parse_args()
    c.header(f"What packing costs, files in {args.dir}, {args.n} items, {args.runs} runs")

    files = {
        f"{args.n:,} puts": (args.n, 0),
        f"{args.n:,} puts, all but 100 acked": (args.n, args.n - 100),
        f"{10 * args.n:,} puts": (10 * args.n, 0),
    }
    packs: dict[tuple[str, str], list[float]] = {}
    with c.tmpdir(args.dir) as d:
        for label, (puts, acks) in files.items():
            source = os.path.join(d, "source.fs")
            queue_file(source, puts, acks)
            for _ in range(args.runs):
                for name, packer in PACKERS.items():
                    packs.setdefault((label, name), []).append(one_pack(source, packer, d))
            for name in os.listdir(d):
                os.remove(os.path.join(d, name))
    print()
    print(c.rst_table(
        [[label] + [f"{c.median(packs[label, name]):.1f}" for name in PACKERS]
         for label in files],
        ["one pack, CPU ms", *PACKERS],
    ))

    ways: dict[str, tuple[Callable[..., Any] | None, bool]] = {
        "ackqueue (its packer)": (None, True),
        "ackqueue, FileStorage's packer": (FileStorage.packer, True),
        "ackqueue, autopack=False": (None, False),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.runs):
        for way, (swapped, autopack) in ways.items():
            with packing_with(swapped):
                for op, us in operations(args.dir, args.n, autopack).items():
                    samples.setdefault((way, op), []).append(us)
    ops = ["put", "get+ack", "put+get+ack, 100 queued"]
    print()
    print(c.rst_table(
        [[way] + [f"{c.median(samples[way, op]):.1f}" for op in ops] for way in ways],
        ["CPU us an operation", *ops],
    ))

    wall, cpu, grew = idle_sessions(args.dir)
    print()
    print(f"an idle session (open, qsize, close) x 20: {wall:.1f} ms wall, {cpu:.1f} ms CPU "
          f"each (medians); the file grew {grew:,} bytes")


if __name__ == "__main__":
    main()
