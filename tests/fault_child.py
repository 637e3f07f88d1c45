"""Child processes for the fault tests: each mode runs one workload until killed or done.

    python fault_child.py pack PATH JOURNAL RUN
        one thread puts items while the main thread packs the file in a loop, journaling
        in the format of benchmarks/stress.py so that its checker can judge the file.
    python fault_child.py interrupt PATH SEED OPS
        puts, gets, acks and nacks while SIGINT arrives at random moments; see
        tests/queue/test_interrupts.py.
    python fault_child.py fsize PATH OP LIMIT
        runs OP (put, ack or pack) under a file-size limit of LIMIT bytes more than the file
        (or LIMIT bytes in all if negative); see tests/storage/test_disk_full.py.
    python fault_child.py bury PATH
        runs a WorkerPool whose handler fails the only item and fills the file limit, so
        that burying the item fails; see tests/workers/test_pool_faults.py.
    python fault_child.py abury PATH
        the same with an AsyncWorkerPool.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import resource
import signal
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, REPO_ROOT)

import ackqueue  # noqa: E402


def load_stress():  # type: ignore[no-untyped-def]
    """benchmarks/stress.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "ackqueue_stress", os.path.join(REPO_ROOT, "benchmarks", "stress.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ackqueue_stress"] = module
    spec.loader.exec_module(module)
    return module


# -- pack: killed while packing --------------------------------------------------------------


PUTS_PER_PACK = 20


def pack_mode(path: str, journal_path: str, run: int) -> None:
    journal = load_stress().Journal(journal_path, run)
    q = ackqueue.AckQueue(path)
    # Puts are rationed per pack: a putter free to run flat out fills a file on tmpfs faster
    # than a pack can copy it, and the packs then slow down without end. The ration keeps the
    # same mix of puts and packs on a fast disk as on a slow one.
    ration = threading.Semaphore(0)

    def putter() -> None:
        n = 0
        while True:
            ration.acquire()
            n += 1
            ident = f"{run}.p.{n}"
            journal.log("p", ident)
            q.put((ident, b"y" * 50))
            journal.log("P", ident)

    threading.Thread(target=putter, daemon=True).start()
    print("ready", flush=True)
    while True:
        ration.release(PUTS_PER_PACK)
        journal.log("k")
        q.pack()
        journal.log("K")


# -- interrupt: Ctrl-C at random moments -------------------------------------------------------


class Interrupter:
    """A thread that sends SIGINT to this process every few milliseconds, at random.

    KeyboardInterrupt is raised only while ``armed`` (during an operation), and the handler
    disarms itself as it raises: an interrupt landing in the loop's own bookkeeping would end
    the run with a traceback instead of testing anything.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed + 1)
        self.stop = threading.Event()
        self.armed = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0.0005, 0.004)):
            os.kill(os.getpid(), signal.SIGINT)

    def quiesce(self) -> None:
        self.armed = False
        self.stop.set()
        self.thread.join()


def interrupt_mode(path: str, seed: int, ops: int) -> None:
    """Random operations with SIGINT at random moments; prints what it saw as JSON.

    A helper thread sends SIGINT to the process at random intervals; Python raises
    KeyboardInterrupt in the main thread wherever it happens to be. After every interrupt the
    queue must still be consistent: what is ready plus what is held matches the stored
    entries, and the next operations work.
    """
    rng = random.Random(seed)
    q = ackqueue.AckQueue(path)
    c = q.connect()
    # Two threads working another queue of the same file share commits with the main
    # thread, so that its operations are also cut while they wait as group-commit followers.
    background = ackqueue.AckQueue(path, name="background")
    quit_background = threading.Event()

    def churn() -> None:
        with background.connect() as bc:
            while not quit_background.is_set():
                background.put("b")
                bc.ack(bc.get())

    churners = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
    for t in churners:
        t.start()
    put_confirmed: set[int] = set()
    put_attempted: set[int] = set()
    acked: set[int] = set()
    got: set[int] = set()
    plain_get_running = False
    plain_gets_cut = 0  # interrupted plain gets: each may have removed an item, unseen
    ack_attempted: set[int] = set()
    reject_attempted: set[int] = set()
    rejected: set[int] = set()
    held: dict[int, object] = {}
    interrupts = 0
    interrupter = Interrupter(seed)
    interrupter.start()
    n = 0
    done = 0
    errors: list[str] = []
    while done < ops:
        try:
            interrupter.armed = True
            roll = rng.random()
            if roll < 0.3 or not q.qsize():
                n += 1
                put_attempted.add(n)
                q.put(n)
                put_confirmed.add(n)
            elif roll < 0.36:
                batch = [n + 1, n + 2, n + 3]
                n += 3
                put_attempted.update(batch)
                q.put_many(batch)
                put_confirmed.update(batch)
            elif roll < 0.41:
                plain_get_running = True
                item = q.get(timeout=1)
                plain_get_running = False
                got.add(item)
            elif roll < 0.42:
                q.pack()
            elif roll < 0.62:
                items = [c.get(timeout=1)] if roll < 0.56 else c.get_many(3, timeout=1)
                for item in items:
                    if item in held:
                        errors.append(f"{item} delivered while held")
                    held[item] = item
            elif held:
                item = rng.choice(list(held))
                if roll < 0.76:
                    ack_attempted.add(item)
                    c.ack(item)
                    acked.add(item)
                elif roll < 0.82:
                    some = rng.sample(list(held), min(3, len(held)))
                    ack_attempted.update(some)
                    c.ack_many(some)
                    acked.update(some)
                    for other in some:
                        del held[other]
                    item = None
                elif roll < 0.9:
                    c.nack(item)
                elif roll < 0.94:
                    reject_attempted.add(item)
                    c.reject(item, "interrupt test")
                    rejected.add(item)
                else:  # an ack and a put committed together, or neither
                    n += 1
                    ack_attempted.add(item)
                    put_attempted.add(n)
                    with c.transaction():
                        c.ack(item)
                        q.put(n)
                    acked.add(item)
                    put_confirmed.add(n)
                if item is not None:
                    del held[item]
            interrupter.armed = False
            done += 1
        except KeyboardInterrupt:  # the handler disarmed itself: nothing cuts this part
            interrupts += 1
            plain_gets_cut += plain_get_running
            plain_get_running = False
            # A hold whose ack or nack was cut may or may not still be held, and a get cut
            # after its claim holds an item the loop never saw: ask.
            held = {d.item: d.item for d in c.deliveries()}
    interrupter.quiesce()
    quit_background.set()
    for t in churners:
        t.join()
    background.close()
    qsize, unacked = q.qsize(), q.unacked_count()
    # still usable: a fresh put comes back, behind everything ready
    q.put(-1)
    drained = []
    while True:
        try:
            drained.append(c.get(timeout=0))
        except ackqueue.Empty:
            break
    c.close()  # gives everything back, acking nothing: the file keeps all of it
    q.close()
    print(json.dumps({
        "interrupts": interrupts,
        "put_attempted": sorted(put_attempted),
        "put_confirmed": sorted(put_confirmed),
        "ack_attempted": sorted(ack_attempted),
        "acked": sorted(acked),
        "reject_attempted": sorted(reject_attempted),
        "rejected": sorted(rejected),
        "got": sorted(got),
        "plain_gets_cut": plain_gets_cut,
        "held": sorted(held),
        "qsize": qsize,
        "unacked": unacked,
        "drained": drained,
        "errors": errors,
    }), flush=True)


# -- fsize: a full disk ----------------------------------------------------------------------------


def set_file_limit(nbytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, resource.RLIM_INFINITY))


def _fill_from_threads(q: ackqueue.AckQueue, threads: int, confirmed: list[int]) -> None:
    """Put from several threads at once (their puts share commits) until the disk is full.

    Adds each confirmed put to ``confirmed``; raises the first error once all have stopped.
    """
    errors: list[BaseException] = []
    lock = threading.Lock()

    def putter(t: int) -> None:
        try:
            for i in range(100_000):
                q.put(("full", t * 100_000 + i, b"z" * 200))
                with lock:
                    confirmed.append(t * 100_000 + i)
        except Exception as exc:
            with lock:
                errors.append(exc)

    workers = [threading.Thread(target=putter, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if len(errors) != threads:
        raise AssertionError(f"only {len(errors)} of {threads} putters stopped with an error")
    if not all(isinstance(e, ackqueue.StorageError) for e in errors):
        raise AssertionError(f"unclear errors: {errors!r}")
    raise errors[0]


def fsize_mode(path: str, op: str, limit: int) -> None:
    """Fill the file limit during ``op``; report the error, then lift the limit and go on."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit raises EFBIG
    report: dict[str, object] = {"op": op}
    q = ackqueue.AckQueue(path)
    c = q.connect()
    held = [c.get(timeout=0) for _ in range(q.qsize())] if op == "ack" else []
    set_file_limit(os.path.getsize(path) + limit if limit >= 0 else -limit)
    confirmed = []
    try:
        if op == "put":
            for i in range(100_000):
                q.put(("full", i, b"z" * 200))
                confirmed.append(i)
        elif op == "ack":
            for item in held:
                c.ack(item)
                confirmed.append(item[1])
        elif op == "pack":
            q.pack()
        elif op == "threads":
            _fill_from_threads(q, 4, confirmed)
        report["error"] = None
    except Exception as exc:
        report["error"] = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        report["error_is_storage_error"] = isinstance(exc, ackqueue.StorageError)
    report["confirmed"] = confirmed
    set_file_limit(resource.RLIM_INFINITY)  # the space comes back
    try:
        q.put(("after", 0, b""))
        report["put_after"] = "ok"
    except Exception as exc:
        report["put_after"] = repr(exc)
    if op == "pack":
        try:
            q.pack()
            report["pack_after"] = "ok"
        except Exception as exc:
            report["pack_after"] = repr(exc)
    report["qsize"] = q.qsize()
    report["unacked"] = q.unacked_count()
    report["unfinished"] = q.unfinished_tasks  # what join() waits for
    print(json.dumps(report), flush=True)
    c.close()
    q.close()


def bury_mode(path: str) -> None:
    """``run_until_empty()`` of a pool whose only item fails, once, while no byte more may be
    written: its burial in the dead letters cannot commit. Report how the run ended (or that
    it did not), where the item is, and where it is after a second run with room again."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit raises EFBIG
    q = ackqueue.AckQueue(path, autopack=False)
    retry = ackqueue.Retry(max_attempts=1)
    report: dict[str, object] = {}

    def fail_and_fill_the_disk(item: object) -> None:
        set_file_limit(os.path.getsize(path))
        raise ValueError(f"cannot handle {item!r}")

    def fail(item: object) -> None:
        raise ValueError(f"cannot handle {item!r}")

    def run(pool: ackqueue.WorkerPool[object], key: str) -> None:
        try:
            stats = pool.run_until_empty()
            report[key] = {"stopped_by": stats.stopped_by, "exit_code": stats.exit_code,
                           "dead": stats.dead}
        except Exception as exc:
            report[key] = {"raised": f"{type(exc).__qualname__}: {exc}"}

    pool = ackqueue.WorkerPool(q, fail_and_fill_the_disk, threads=2, retry=retry, poll=0.05)
    runner = threading.Thread(target=run, args=(pool, "full"), daemon=True)
    runner.start()
    runner.join(20)
    report["hung"] = runner.is_alive()
    set_file_limit(resource.RLIM_INFINITY)  # the space comes back
    if runner.is_alive():
        pool.stop()
        runner.join(20)
    report["after_full"] = {"ready": q.qsize(), "held": q.unacked_count(),
                            "dead": q.dead_count()}
    run(ackqueue.WorkerPool(q, fail, threads=2, retry=retry, poll=0.05), "again")
    report["after_again"] = {"ready": q.qsize(), "held": q.unacked_count(),
                             "dead": q.dead_count()}
    print(json.dumps(report), flush=True)
    q.close()


def abury_mode(path: str) -> None:
    """:func:`bury_mode` with an ``AsyncWorkerPool``, its event loop in a thread of its own."""
    import asyncio

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    retry = ackqueue.Retry(max_attempts=1)
    report: dict[str, object] = {}
    started: list[tuple[asyncio.AbstractEventLoop, ackqueue.AsyncWorkerPool]] = []
    first_run_over, limit_lifted = threading.Event(), threading.Event()

    async def fail_and_fill_the_disk(item: object) -> None:
        set_file_limit(os.path.getsize(path))
        raise ValueError(f"cannot handle {item!r}")

    async def fail(item: object) -> None:
        raise ValueError(f"cannot handle {item!r}")

    async def run(pool: ackqueue.AsyncWorkerPool, key: str) -> None:
        try:
            stats = await pool.run_until_empty()
            report[key] = {"stopped_by": stats.stopped_by, "exit_code": stats.exit_code,
                           "dead": stats.dead}
        except Exception as exc:
            report[key] = {"raised": f"{type(exc).__qualname__}: {exc}"}

    def counts(q: ackqueue.AsyncAckQueue[object]) -> dict[str, int]:
        return {"ready": q.qsize(), "held": q.unacked_count(), "dead": q.sync.dead_count()}

    async def main() -> None:
        async with ackqueue.AsyncAckQueue(path, autopack=False) as q:
            pool = ackqueue.AsyncWorkerPool(q, fail_and_fill_the_disk, concurrency=2,
                                            retry=retry, poll=0.05)
            started.append((asyncio.get_running_loop(), pool))
            await run(pool, "full")
            first_run_over.set()
            await asyncio.to_thread(limit_lifted.wait)
            report["after_full"] = counts(q)
            await run(ackqueue.AsyncWorkerPool(q, fail, concurrency=2, retry=retry, poll=0.05),
                      "again")
            report["after_again"] = counts(q)

    runner = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    runner.start()
    report["hung"] = not first_run_over.wait(20)
    set_file_limit(resource.RLIM_INFINITY)  # the space comes back
    if report["hung"] and started:
        loop, pool = started[0]
        loop.call_soon_threadsafe(pool.stop)
    limit_lifted.set()
    runner.join(30)
    print(json.dumps(report), flush=True)


def main() -> None:
    mode = sys.argv[1]
    if mode == "pack":
        pack_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "interrupt":
        interrupt_mode(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "fsize":
        fsize_mode(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "bury":
        bury_mode(sys.argv[2])
    elif mode == "abury":
        abury_mode(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
