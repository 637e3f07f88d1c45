"""Which engine should carry ``AckQueue(path, shared=True)``: the queue on ZEO over a Unix
socket (runzeo, FileStorage with an fsync a commit) beside the queue on RelStorage's SQLite
adapter with ``synchronous=FULL`` (an fsync a commit too: as durable as strict single-process
mode), and on RelStorage's PostgreSQL adapter (``AckQueue("postgresql://...")``, a server on
127.0.0.1 started for the run as ``tests/postgres_server.py`` does, fsync on), with 1, 2 and 4
processes, in one run (the machine is shared: read the ratios).

    python benchmarks/bench_engines.py [--items 1000] [--processes 1,2,4] [--rounds 1]
                                       [--engines zeo,sqlite,postgresql] [--jobs ...]

For each engine and process count: ``put`` one at a time (the items split between the
processes), then get+ack one at a time, then ``get_many``/``ack_many`` of 10, each process with
one consumer thread. ``--jobs`` picks among those (``put,get+ack,get+ack x10``, the default)
and two more kinds of put that write a tree of their own besides the entry: ``put key`` (each
item by a key of its own, ``unique="forever"``: the key index and the seen-set) and ``put
delay`` (each with a delay of an hour: the index of delayed entries). Items are put
beforehand with ``put_many``; the clock runs from "go" to the last put or ack. Prints
items/s, the ratio of 4 processes to 1, each engine's ratio to ZEO, and the write conflicts
retried per item (counted from ackqueue's debug log in each worker).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OPEN = r"""
import sys, ackqueue

def open_queue(engine, where):
    if engine == "zeo":
        return ackqueue.AckQueue("zeo://" + where, session_timeout=30)
    if engine == "postgresql":
        return ackqueue.AckQueue(where, session_timeout=30)
    import ZODB
    from relstorage.adapters.sqlite.adapter import Sqlite3Adapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage
    options = Options(keep_history=False)
    adapter = Sqlite3Adapter(where, {"synchronous": "FULL"}, options=options)
    return ackqueue.AckQueue(db=ZODB.DB(RelStorage(adapter, options=options)), session_timeout=30)
"""

WORKER = OPEN + _common.COUNT_CONFLICTS + r"""
import hashlib, json, os, time
engine, where, job, count, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(
    sys.argv[5])
q = open_queue(engine, where)
c = q.connect()
print("ready", flush=True)
sys.stdin.readline()
done = 0
if job.startswith("put"):
    me = os.getpid()
    for n in range(count):
        item = {"n": n, "url": f"http://example.org/{me}/{n}"}
        if job == "put":
            q.put(item)
        elif job == "put key":  # a key as a crawler's is: a digest, spread over the tree
            q.put(item, key=hashlib.sha1(item["url"].encode()).hexdigest(), unique="forever")
        else:
            q.put(item, delay=3600)
    done = count
else:
    while True:
        try:
            items = c.get_many(batch, timeout=1.0)
        except ackqueue.Empty:
            break
        c.ack_many(items)
        done += len(items)
        last = time.time()
print(json.dumps({"done": done, "last": time.time() if job.startswith("put") else last,
                  "conflicts": Conflicts.count}), flush=True)
c.close()
q.close()
"""

FILL = OPEN + r"""
q = open_queue(sys.argv[1], sys.argv[2])
items = int(sys.argv[3])
for start in range(0, items, 500):
    q.put_many([{"n": n, "url": f"http://example.org/{n}"} for n in
                range(start, min(items, start + 500))])
q.close()
"""


WAKER = OPEN + r"""
q = open_queue(sys.argv[1], sys.argv[2])
rounds = int(sys.argv[3])
""" + _common.WAKER_LOOP


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))


def start_zeo(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    sock = os.path.join(directory, "zeo.sock")
    argv = [sys.executable, "-m", "ZEO.runzeo", "-a", sock, "-f", os.path.join(directory, "q.fs")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("runzeo did not start")
        time.sleep(0.02)
    return proc, sock


POSTGRES: list[Any] = []  # the run's PostgreSQL server, started once by main()


@contextlib.contextmanager
def engine_at(engine: str) -> Iterator[str]:
    """A fresh place for ``engine`` in a temporary directory: a ZEO server's socket (the
    server runs until the block ends), a RelStorage SQLite directory, or the URI of a new
    database on the run's PostgreSQL server."""
    if engine == "postgresql":
        yield POSTGRES[0].new_database()
        return
    with _common.tmpdir() as tmp:
        if engine != "zeo":
            yield os.path.join(tmp, "rs")
            return
        server, sock = start_zeo(tmp)
        try:
            yield sock
        finally:
            server.terminate()
            server.wait()


def run(engine: str, where: str, job: str, processes: int, items: int,
        batch: int) -> tuple[float, float]:
    """Items/s of ``processes`` workers doing ``job`` on ``items`` items between them, and
    the write conflicts they retried per item."""
    # Fills the queue, or for puts only creates the database: RelStorage's SQLite adapter
    # fails ("table pack_object already exists") when processes create one at the same time.
    putting = job.startswith("put")
    subprocess.run([sys.executable, "-c", FILL, engine, where, str(0 if putting else items)],
                   env=env(), check=True, cwd=ROOT)
    share = items // processes
    argv = [sys.executable, "-c", WORKER, engine, where, job, str(share), str(batch)]
    go, results = _common.start_together([argv] * processes, env())
    done = sum(r["done"] for r in results)
    expected = share * processes if putting else items
    assert done == expected, f"{engine} {job}: {done} of {expected}"
    return done / (max(r["last"] for r in results) - go), sum(r["conflicts"]
                                                              for r in results) / done


def wake_ms(engine: str, where: str, rounds: int) -> float:
    """Median ms from a put in this process to the return of a get blocked in another."""
    subprocess.run([sys.executable, "-c", FILL, engine, where, "0"], env=env(), check=True,
                   cwd=ROOT)
    opener: dict[str, Any] = {}
    exec(OPEN, opener)
    q = opener["open_queue"](engine, where)
    waker = subprocess.Popen([sys.executable, "-c", WAKER, engine, where, str(rounds)], env=env(),
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert waker.stdout is not None
    waits = []
    try:
        for _ in range(rounds):
            assert waker.stdout.readline().strip() == "ready"
            time.sleep(0.1)  # let the get block first: this measures the wake-up, not a race
            q.put(time.time())
            waits.append(float(waker.stdout.readline()) * 1000)
    finally:
        waker.wait()
        q.close()
    return _common.median(waits)


def start_postgres(stack: contextlib.ExitStack) -> bool:
    """Start the run's PostgreSQL server, until ``stack`` closes; False (saying why) where
    there is none."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from postgres_server import running, why_unavailable

    reason = why_unavailable()
    if reason is not None:
        print(f"postgresql: SKIPPED, {reason}")
        return False
    POSTGRES.append(stack.enter_context(running()))
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--engines", default="zeo,sqlite,postgresql")
    parser.add_argument("--jobs", default=",".join(JOBS[:3]),
                        help=f"some of {','.join(JOBS)}")
    args = parser.parse_args()
    jobs = args.jobs.split(",")
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown jobs {unknown}: choose among {JOBS}")
    engines = args.engines.split(",")
    with contextlib.ExitStack() as stack:
        if "postgresql" in engines and not start_postgres(stack):
            engines.remove("postgresql")
        measure(engines, [int(n) for n in args.processes.split(",")], args.items, args.rounds,
                jobs)


JOBS = ["put", "get+ack", "get+ack x10", "put key", "put delay"]


def measure(engines: list[str], counts: list[int], items_per_job: int, rounds: int,
            picked: list[str]) -> None:
    every = {"put": ("put", 1, items_per_job), "put key": ("put key", 1, items_per_job),
             "put delay": ("put delay", 1, items_per_job),
             "get+ack": ("get+ack", 1, items_per_job),
             "get+ack x10": ("get+ack x10", 10, items_per_job * 3)}
    jobs = [every[job] for job in picked]
    table: dict[tuple[str, str, int], list[float]] = {}
    conflicts: dict[tuple[str, str, int], list[float]] = {}
    failures: dict[str, int] = {}
    for _ in range(rounds):
        for engine in engines:
            for job, batch, items in jobs:
                for n in counts:
                    with engine_at(engine) as where:
                        try:
                            rate, per_item = run(engine, where, job.removesuffix(" x10"), n,
                                                 items, batch)
                        except (AssertionError, ValueError) as exc:
                            # RelStorage 4.3's SQLite adapter has failed acks with a
                            # KeyError in conflict resolution here: count it, go on.
                            failures[engine] = failures.get(engine, 0) + 1
                            print(f"  {engine:10} {job:12} {n} proc: FAILED ({exc})", flush=True)
                            continue
                    table.setdefault((engine, job, n), []).append(rate)
                    conflicts.setdefault((engine, job, n), []).append(per_item)
                    print(f"  {engine:10} {job:12} {n} proc: {rate:7.0f} items/s, "
                          f"{per_item:.3f} conflicts/item", flush=True)
    wakes: dict[str, list[float]] = {}
    for _ in range(rounds):
        for engine in engines:
            with engine_at(engine) as where:
                wakes.setdefault(engine, []).append(wake_ms(engine, where, 10))
            print(f"  {engine:10} wake-up across processes: {wakes[engine][-1]:.0f} ms "
                  "(median)", flush=True)

    def median(figures: dict[tuple[str, str, int], list[float]], key: tuple[str, str, int]
               ) -> float:
        return _common.median(figures.get(key) or [float("nan")])

    print(f"\nmedians over {rounds} round(s), items/s "
          f"({counts[-1]}p/{counts[0]}p = the ratio of {counts[-1]} processes to {counts[0]}; "
          f"conflicts retried per item at {counts[-1]} processes)")
    print(f"| job | engine | {' | '.join(f'{n} proc' for n in counts)} | "
          f"{counts[-1]}p/{counts[0]}p | conflicts/item |")
    print("|---|---|" + "---:|" * (len(counts) + 2))
    for job, _, _ in jobs:
        for engine in engines:
            rates = [median(table, (engine, job, n)) for n in counts]
            print(f"| {job} | {engine} | " + " | ".join(f"{r:,.0f}" for r in rates)
                  + f" | {rates[-1] / rates[0]:.2f} | "
                  f"{median(conflicts, (engine, job, counts[-1])):.3f} |")
        for engine in engines:
            if engine == "zeo" or "zeo" not in engines:
                continue
            ratios = [median(table, (engine, job, n)) / median(table, ("zeo", job, n))
                      for n in counts]
            print(f"| {job} | {engine}/zeo | " + " | ".join(f"{r:.2f}x" for r in ratios)
                  + " | | |")
    for engine in engines:
        print(f"runs that failed, {engine}: {failures.get(engine, 0)}")
        print(f"wake-up across processes, {engine}: median {_common.median(wakes[engine]):.0f} ms")


if __name__ == "__main__":
    main()
