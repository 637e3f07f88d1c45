"""Crash stress: a mixed workload in a subprocess, SIGKILLed at random moments, over and over.

    python3 benchmarks/stress.py --kills 200

The child runs two threads doing puts, ``put_many``, consumer gets, acks, nacks, plain gets,
packs and transactions (an ack, a plain get and a ``put_many`` committed together), journaling
each operation to a file before it starts and after it returns; the journal is written with
``os.write``, which survives SIGKILL. The parent kills the child at a random moment, opens
the file, checks it against the journal, and starts the next child on the same file. The
checks:

* every item whose put returned is present or was (possibly) consumed;
* no item whose ack (or plain get) returned is present or delivered again;
* no item is present twice, and nothing is present that was never put;
* no item is delivered twice while held;
* redeliveries are bounded by the nacks plus what was held at the kills.

It prints the counts as JSON and exits non-zero on any violation. The test suite runs a
short version (``tests/queue/test_faults.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import ackqueue  # noqa: E402

MAX_HELD = 20
EARLY_KILLS = 0.1  # share of kills aimed at the child's start instead of its workload
LOW_DEPTH = 50


# -- the child: the workload ---------------------------------------------------------------


class Journal:
    def __init__(self, path: str, run: int) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.run = run

    def log(self, event: str, ident: str = "-") -> None:
        # one write per line: O_APPEND keeps lines from the two threads whole
        os.write(self.fd, f"{self.run} {event} {ident}\n".encode())


def _work(q: ackqueue.AckQueue, journal: Journal, worker: int, seed: int) -> None:
    rng = random.Random(seed)
    n = 0
    held: list[tuple[str, object]] = []

    def new_id() -> str:
        nonlocal n
        n += 1
        return f"{journal.run}.{worker}.{n}"

    with q.connect() as c:
        while True:
            roll = rng.random()
            if len(held) >= MAX_HELD:
                roll = 0.6  # settle something before getting more
            if q.qsize() < LOW_DEPTH or roll < 0.30:
                if roll < 0.05:
                    ids = [new_id() for _ in range(rng.randint(2, 5))]
                    for ident in ids:
                        journal.log("p", ident)
                    q.put_many([(ident, b"x" * 50) for ident in ids])
                    for ident in ids:
                        journal.log("P", ident)
                else:
                    ident = new_id()
                    journal.log("p", ident)
                    q.put((ident, b"x" * 50))
                    journal.log("P", ident)
            elif roll < 0.55:
                try:
                    item = c.get_nowait()
                except ackqueue.Empty:
                    continue
                journal.log("G", item[0])
                held.append((item[0], item))
            elif roll < 0.75 and held:
                ident, item = held.pop(rng.randrange(len(held)))
                journal.log("a", ident)
                c.ack(item)
                journal.log("A", ident)
            elif roll < 0.85 and held:
                ident, item = held.pop(rng.randrange(len(held)))
                journal.log("n", ident)
                c.nack(item)
                journal.log("N", ident)
            elif roll < 0.88:
                journal.log("q")
                try:
                    item = q.get_nowait()
                except ackqueue.Empty:
                    journal.log("Q")
                    continue
                journal.log("Q", item[0])
            elif roll < 0.90 and worker == 0:
                journal.log("k")
                q.pack()
                journal.log("K")
            elif roll < 0.95 and held:
                # One commit for all three, or none: the ack, the plain get's removal, the puts.
                ident, item = held.pop(rng.randrange(len(held)))
                new = [new_id(), new_id()]
                # The two workers' transactions interleave: their lines name the worker.
                journal.log("t", f"{worker}:")
                with c.transaction():
                    journal.log("ta", f"{worker}:{ident}")
                    c.ack(item)
                    with contextlib.suppress(ackqueue.Empty):
                        journal.log("tq", f"{worker}:{q.get_nowait()[0]}")
                    for ident2 in new:
                        journal.log("tp", f"{worker}:{ident2}")
                    q.put_many([(ident2, b"x" * 50) for ident2 in new])
                journal.log("T", f"{worker}:")


def child_main(path: str, journal_path: str, run: int, seed: int, pack_floor: int) -> None:
    journal = Journal(journal_path, run)
    q = ackqueue.AckQueue(path)
    journal.log("R")
    if pack_floor:
        # Automatic packs every pack_floor bytes of garbage: a small file is packed in line,
        # in the thread whose put or ack made it due, so kills land inside those too. Each is
        # journaled ("z" ... "Z") to count them.
        packer = q._store.packer
        packer.min_bytes = pack_floor  # type: ignore[attr-defined]
        pack_inline = packer._pack_inline  # type: ignore[attr-defined]

        def journaled_pack() -> None:
            journal.log("z")
            pack_inline()
            journal.log("Z")

        packer._pack_inline = journaled_pack  # type: ignore[attr-defined]
    def work(worker: int) -> None:
        try:
            _work(q, journal, worker, seed * 10 + worker)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)  # a failed operation is a finding: end the run before the kill

    threads = [
        threading.Thread(target=work, args=(w,), daemon=True)
        for w in range(2)
    ]
    for t in threads:
        t.start()
    print("ready", flush=True)
    for t in threads:
        t.join()  # the workers loop until the parent kills this process


# -- the parent: kills and checks ----------------------------------------------------------


@dataclass
class Tally:
    put_attempted: set[str] = field(default_factory=set)
    put_confirmed: set[str] = field(default_factory=set)
    ack_attempted: set[str] = field(default_factory=set)
    ack_confirmed: set[str] = field(default_factory=set)
    got_confirmed: set[str] = field(default_factory=set)  # plain get, removed for good
    deliveries: collections.Counter[str] = field(default_factory=collections.Counter)
    nacks: int = 0
    held_at_kills: int = 0
    gets_in_flight_at_kills: int = 0
    kills_in_pack: int = 0
    kills_in_autopack: int = 0
    autopacks: int = 0
    kills_in_transaction: int = 0
    errors: list[str] = field(default_factory=list)


def read_journal(journal_path: str) -> Tally:
    tally = Tally()
    if not os.path.exists(journal_path):
        return tally
    by_run: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)
    with open(journal_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3:
                continue  # a line cut by the kill
            by_run[int(parts[0])].append((parts[1], parts[2]))
    for events in by_run.values():
        _replay_run(events, tally)
    return tally


def _replay_run(events: list[tuple[str, str]], t: Tally) -> None:
    held: set[str] = set()
    in_flight_gets = 0
    packing = False
    autopacking = False
    txs: dict[str, list[tuple[str, str]]] = {}  # open transactions by worker
    tx: list[tuple[str, str]] | None = None
    worker = ""
    for event, ident in events:
        if event in ("t", "ta", "tq", "tp", "T"):
            worker, _, ident = ident.partition(":")
            tx = txs.get(worker)
        if event == "p":
            t.put_attempted.add(ident)
        elif event == "P":
            t.put_confirmed.add(ident)
        elif event == "G":
            if ident in held:
                t.errors.append(f"{ident} delivered while already held in the same run")
            if ident in t.ack_confirmed or ident in t.got_confirmed:
                t.errors.append(f"{ident} delivered after its ack/get returned")
            t.deliveries[ident] += 1
            held.add(ident)
        elif event == "a":
            t.ack_attempted.add(ident)
        elif event == "A":
            t.ack_confirmed.add(ident)
            held.discard(ident)
        elif event == "n":
            t.nacks += 1
            held.discard(ident)
        elif event == "q":
            in_flight_gets += 1
        elif event == "Q":
            in_flight_gets -= 1
            if ident != "-":
                if ident in t.ack_confirmed or ident in t.got_confirmed:
                    t.errors.append(f"{ident} got after its ack/get returned")
                t.deliveries[ident] += 1
                t.got_confirmed.add(ident)
        elif event == "k":
            packing = True
        elif event == "K":
            packing = False
        elif event == "z":
            autopacking = True
        elif event == "Z":
            autopacking = False
            t.autopacks += 1
        elif event == "t":
            txs[worker] = []
        elif event in ("ta", "tp") and tx is not None:
            tx.append((event, ident))
            (t.ack_attempted if event == "ta" else t.put_attempted).add(ident)
        elif event == "tq" and tx is not None:
            if ident in t.ack_confirmed or ident in t.got_confirmed:
                t.errors.append(f"{ident} got in a transaction after its ack/get returned")
            tx.append((event, ident))
        elif event == "T" and tx is not None:
            for kind, ident2 in tx:
                if kind == "ta":
                    t.ack_confirmed.add(ident2)
                    held.discard(ident2)
                elif kind == "tq":
                    t.deliveries[ident2] += 1
                    t.got_confirmed.add(ident2)
                else:
                    t.put_confirmed.add(ident2)
            del txs[worker]
    # whatever this run still held when it was killed may be delivered again
    t.held_at_kills += len(held)
    t.gets_in_flight_at_kills += in_flight_gets
    t.kills_in_pack += packing
    t.kills_in_autopack += autopacking
    for tx in txs.values():
        t.kills_in_transaction += 1
        # its commit may have landed before the kill: the plain get's item may be gone
        t.gets_in_flight_at_kills += sum(kind == "tq" for kind, _ in tx)


def stored_ids(path: str) -> list[str]:
    """Every item id in the file, read through a consumer that acks nothing."""
    ids = []
    with ackqueue.AckQueue(path) as q, q.connect() as c:
        expected = q.qsize()
        while True:
            try:
                ids.append(c.get_nowait()[0])
            except ackqueue.Empty:
                break
        if len(ids) != expected:
            raise AssertionError(f"qsize() said {expected} but {len(ids)} items were read")
    return ids


def check(path: str, journal_path: str) -> tuple[Tally, dict[str, int]]:
    t = read_journal(journal_path)
    present = collections.Counter(stored_ids(path))
    errors = t.errors
    for ident, n in present.items():
        if n > 1:
            errors.append(f"{ident} stored {n} times")
        if ident not in t.put_attempted:
            errors.append(f"{ident} stored but never put")
        if ident in t.ack_confirmed:
            errors.append(f"{ident} stored after its ack returned")
        if ident in t.got_confirmed:
            errors.append(f"{ident} stored after a plain get returned it")
    missing = [
        ident
        for ident in t.put_confirmed
        if ident not in present and ident not in t.ack_attempted and ident not in t.got_confirmed
    ]
    # a plain get killed after its commit removed an item nobody recorded: at most one each
    if len(missing) > t.gets_in_flight_at_kills:
        errors.append(
            f"{len(missing)} confirmed puts are gone without an ack "
            f"(at most {t.gets_in_flight_at_kills} explained by plain gets cut by a kill): "
            f"{sorted(missing)[:10]}"
        )
    redeliveries = sum(n - 1 for n in t.deliveries.values())
    allowed = t.nacks + t.held_at_kills
    if redeliveries > allowed:
        errors.append(f"{redeliveries} redeliveries > nacks {t.nacks} + held at kills")
    counts = {
        "confirmed_puts": len(t.put_confirmed),
        "confirmed_acks": len(t.ack_confirmed),
        "plain_gets": len(t.got_confirmed),
        "present": sum(present.values()),
        "deliveries": sum(t.deliveries.values()),
        "redeliveries": redeliveries,
        "nacks": t.nacks,
        "held_at_kills": t.held_at_kills,
        "redeliveries_beyond_nacks": max(0, redeliveries - t.nacks),
        "missing_explained_by_cut_plain_gets": len(missing),
        "kills_in_pack": t.kills_in_pack,
        "kills_in_autopack": t.kills_in_autopack,
        "autopacks": t.autopacks,
        "kills_in_transaction": t.kills_in_transaction,
    }
    return t, counts


def run_stress(
    workdir: str,
    kills: int,
    seed: int,
    max_delay: float,
    env: dict[str, str] | None = None,
    verbose: bool = False,
    pack_floor: int = 0,
) -> dict[str, object]:
    rng = random.Random(seed)
    path = os.path.join(workdir, "stress.fs")
    journal_path = os.path.join(workdir, "journal.txt")
    started = time.monotonic()
    errors: list[str] = []
    early = 0
    for run in range(kills):
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", path, journal_path,
             str(run), str(rng.randrange(1 << 30)), str(pack_floor)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        if rng.random() < EARLY_KILLS:
            # kill while the child starts and opens the file (index rebuild, first commit)
            time.sleep(rng.uniform(0, 0.3))
            early += 1
        else:
            line = child.stdout.readline()
            if line.strip() != b"ready":
                child.kill()
                child.wait()
                raise RuntimeError(f"run {run}: the child did not start ({child.returncode})")
            # the random moment of the kill: not synchronisation, the point of the test
            time.sleep(rng.uniform(0, max_delay))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        if child.returncode != -signal.SIGKILL:
            errors.append(f"run {run}: child exited with {child.returncode} before the kill")
        try:
            tally, counts = check(path, journal_path)
        except Exception as exc:
            errors.append(f"after kill {run + 1}: the file did not open or read: {exc!r}")
            break
        if tally.errors:
            errors.extend(f"after kill {run + 1}: {e}" for e in tally.errors)
            break
        if verbose and (run + 1) % 20 == 0:
            print(f"{run + 1} kills: {json.dumps(counts)}", flush=True)
    _, counts = check(path, journal_path)
    return {
        "ok": not errors,
        "kills": kills,
        "kills_while_opening": early,
        "seconds": round(time.monotonic() - started, 1),
        "file_bytes": os.path.getsize(path),
        **counts,
        "errors": errors[:20],
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        path, journal_path, run, seed, pack_floor = sys.argv[2:7]
        child_main(path, journal_path, int(run), int(seed), int(pack_floor))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-delay", type=float, default=0.5,
                        help="longest time a child runs before its kill (s)")
    parser.add_argument("--dir", default=None, help="work directory (default: a new temp dir)")
    parser.add_argument("--pack-floor", type=int, default=0,
                        help="the children's automatic packing floor in bytes (default: "
                             "ackqueue's, 1 MB); a small one packs every few dozen commits")
    args = parser.parse_args()
    import tempfile

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    workdir = args.dir or tempfile.mkdtemp(prefix="ackqueue-stress-")
    os.makedirs(workdir, exist_ok=True)
    print(f"stress: {args.kills} kills, seed {seed}, in {workdir}", flush=True)
    result = run_stress(workdir, args.kills, seed, args.max_delay, verbose=True,
                        pack_floor=args.pack_floor)
    print(json.dumps(result, indent=1), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
