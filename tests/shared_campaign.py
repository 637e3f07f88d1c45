"""A kill campaign on ``AckQueue(path, shared=True)``: worker processes run a mixed workload
(puts, gets, acks, nacks, transactions that ack one item and put another) while the campaign
SIGKILLs, each time after a random number of logged events, a worker (the one that started
the server among them) or the server itself; a killed worker is replaced. Afterwards one
process drains the queue and the workers' logs are checked:

* every confirmed put (its ``put`` or transaction returned) was consumed (got by someone, or
  still in the queue at the end);
* every confirmed ack stays acked: never got again afterwards, never left in the queue;
* an item got twice was first held by a process that was killed or stopped past its lease, or
  was given back (nack, or an ack whose outcome was unknown because the server died under it);
* an item given back with a delay (a retry's nack) was not got again before its time.

With ``stops``, the campaign also SIGSTOPs a worker for longer than its session's lease (so
another process reaps it, takes what it held and may ack it) and SIGCONTs it: an ack the
stopped worker makes afterwards must fail (fencing), and nothing it gets afterwards may be an
item another process's ack had returned for (issue 21 items 2 and 3).

Used by ``tests/shared/test_shared_kills.py`` (a few kills) and ``benchmarks/kill_shared.py``
(100+).
Each worker appends one line per confirmed event to a log of its own, flushed at once: the
kernel keeps what was written when the process is SIGKILLed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

from campaign_children import env_at, server_pid, start_child, stderr_tail

LEASE = 2.0  # session lease of the workers: a killed worker's holds come back after it

WORKER = r"""
import os, random, sys, time
import ackqueue
from ackqueue.storage import zeo as sharedserver

path, logdir, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
log = open(os.path.join(logdir, f"log-{os.getpid()}"), "a", buffering=1)

def note(*words):
    log.write(" ".join([repr(time.time())] + [str(w) for w in words]) + "\n")

q = ackqueue.AckQueue(path, shared=True, session_timeout=float(sys.argv[4]))
c = q.connect()
DELAY = 0.5
note("open", os.getpid())
print("open", flush=True)
n = 0
stop = os.path.join(logdir, "stop")
while not os.path.exists(stop):
    n += 1
    new = f"{os.getpid()}-{n}"
    item = None
    roll = rng.random()
    try:
        if roll < 0.3:
            note("put?", new)
            q.put(new)
            note("put", new)
        elif roll < 0.35:
            note("put?", new + "a", new + "b")
            q.put_many([new + "a", new + "b"])
            note("put", new + "a", new + "b")
        else:
            note("get?")
            try:
                item = c.get(timeout=0.2)
            except ackqueue.Empty:
                continue
            note("got", item)
            roll = rng.random()
            if roll < 0.6:
                c.ack(item)
                note("acked", item)
            elif roll < 0.85:
                note("put?", new)
                with c.transaction():
                    q.put(new)
                    c.ack(item)
                note("acked", item)
                note("put", new)
            elif roll < 0.92:
                c.nack(item)
                note("nacked", item)
            else:  # a retry: nobody may get it again before its time
                due = time.time() + DELAY
                c.nack(item, delay=DELAY)
                note("delayed", item, repr(due))
    except (ackqueue.LeaseExpiredError, ackqueue.StorageError) as exc:
        note("failed", repr(exc).replace(" ", "_")[:200])
        if item is not None:  # its ack failed or may not have committed: it may come again
            note("released", item)
c.close()
q.close()
note("closed")
"""

DRAIN = r"""
import sys
import ackqueue
q = ackqueue.AckQueue(sys.argv[1], shared=True, session_timeout=float(sys.argv[2]))
c = q.connect()
while True:
    try:
        item = c.get(timeout=float(sys.argv[3]))
    except ackqueue.Empty:
        break
    print(item, flush=True)
    c.ack(item)
c.close()
q.close()
"""


@dataclass
class Result:
    kills: int = 0
    stops: int = 0  # SIGSTOPs past the lease, each followed by SIGCONT
    server_kills: int = 0
    starter_killed: bool = False
    confirmed_puts: int = 0
    confirmed_acks: int = 0
    consumed: int = 0
    drained: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def _logged_events(logdir: str) -> int:
    total = 0
    for name in os.listdir(logdir):
        if name.startswith("log-"):
            with open(os.path.join(logdir, name), "rb") as f:
                total += f.read().count(b"\n")
    return total


def _wait_for_events(logdir: str, events: int, result: Result, within: float = 60.0) -> bool:
    """Wait until the workers have logged ``events`` more lines: the kill point is chosen by
    what the workload did, not by seconds, so a fast disk is killed as often as a slow one.
    False (a problem noted) when they log nothing for ``within`` seconds."""
    target = _logged_events(logdir) + events
    deadline = time.monotonic() + within
    while (seen := _logged_events(logdir)) < target:
        if time.monotonic() > deadline:
            result.problems.append(f"the workers logged {seen - target + events} of {events} "
                                   f"events in {within:.0f} s")
            return False
        time.sleep(0.002)
    return True


def run(path: str, logdir: str, kills: int, root: str, workers: int = 3,
        seed: int = 0, server_share: float = 0.35, stops: int = 0) -> Result:
    """Run the campaign on queue file ``path`` with ``kills`` SIGKILLs and ``stops`` SIGSTOPs
    of a worker past its lease (then SIGCONT), in a random order; the checked result."""
    rng = random.Random(seed)
    env = env_at(root)
    result = Result()
    started = time.monotonic()
    killed: set[int] = set()
    stopped: set[int] = set()  # reaped while stopped: what they held went to others
    procs: list[subprocess.Popen[str]] = []
    stderr_of: dict[int, str] = {}

    def start_worker() -> None:
        seed = str(rng.randrange(1 << 30))
        err = os.path.join(logdir, f"stderr-{seed}")
        procs.append(start_child(WORKER, [path, logdir, seed, str(LEASE)], env, stderr_path=err))
        stderr_of[procs[-1].pid] = err

    try:
        start_worker()  # the first one starts the server
        starter = procs[0]
        for _ in range(workers - 1):
            start_worker()
        moves = ["kill"] + rng.sample(["kill"] * (kills - 1) + ["stop"] * stops,
                                      kills - 1 + stops) if kills else ["stop"] * stops
        for k, move in enumerate(moves):
            if not _wait_for_events(logdir, rng.randint(2, 60), result):
                break
            time.sleep(rng.uniform(0, 0.004))  # land anywhere between two logged events
            if move == "stop":
                victim = rng.choice(procs)
                victim.send_signal(signal.SIGSTOP)
                stopped_at = time.time()
                # Past the lease: the others reap its session and take what it held. The
                # fault's length, not a wait for anything: the campaign then lets it go on.
                time.sleep(LEASE * rng.uniform(1.5, 2.5))
                victim.send_signal(signal.SIGCONT)
                with open(os.path.join(logdir, "stops"), "a") as f:  # to trace a problem
                    f.write(f"{victim.pid} {stopped_at!r} {time.time()!r}\n")
                stopped.add(victim.pid)
                result.stops += 1
                continue
            if k == 0:
                victim = starter
            elif rng.random() < server_share:
                pid = server_pid(path)
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        result.server_kills += 1
                        result.kills += 1
                    except ProcessLookupError:
                        pass
                    continue
                victim = rng.choice(procs)
            else:
                victim = rng.choice(procs)
            victim.send_signal(signal.SIGKILL)
            victim.wait(30)
            killed.add(victim.pid)
            result.kills += 1
            result.starter_killed |= victim is starter
            procs.remove(victim)
            start_worker()
    finally:
        open(os.path.join(logdir, "stop"), "w").close()
        for p in procs:
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                result.problems.append(f"worker {p.pid} did not stop within 120 s")
            else:
                if p.returncode != 0:
                    result.problems.append(f"worker {p.pid} exited {p.returncode}: "
                                           f"{stderr_tail(stderr_of[p.pid])}")
    drained = subprocess.run([sys.executable, "-c", DRAIN, path, str(LEASE), str(LEASE * 3)],
                             env=env, capture_output=True, text=True, timeout=300)
    if drained.returncode != 0:
        result.problems.append(f"the drain failed: {drained.stderr[-2000:]}")
    result.seconds = time.monotonic() - started
    _check(logdir, drained.stdout.split(), killed | stopped, result)
    return result


def _check(logdir: str, drained: list[str], killed: set[int], result: Result) -> None:
    puts: set[str] = set()
    maybe_puts: set[str] = set()
    acks: dict[str, float] = {}
    gets: dict[str, list[tuple[float, int]]] = defaultdict(list)
    released: dict[int, set[str]] = defaultdict(set)  # per pid: items it gave back or lost
    delayed: dict[str, list[tuple[float, float]]] = defaultdict(list)  # (nacked at, due)
    for name in os.listdir(logdir):
        if not name.startswith("log-"):
            continue
        pid = int(name[4:])
        with open(os.path.join(logdir, name)) as f:
            for line in f:
                if not line.endswith("\n"):
                    continue  # cut by the kill
                stamp, what, *items = line.split()
                t = float(stamp)
                if what == "put":
                    puts.update(items)
                elif what == "put?":
                    maybe_puts.update(items)
                elif what == "acked":
                    acks[items[0]] = t
                elif what == "got":
                    gets[items[0]].append((t, pid))
                elif what in ("nacked", "released"):
                    released[pid].add(items[0])
                elif what == "delayed":
                    released[pid].add(items[0])
                    delayed[items[0]].append((t, float(items[1])))
    result.confirmed_puts, result.confirmed_acks = len(puts), len(acks)
    drained_set = set(drained)
    result.drained = len(drained)
    consumed = set(gets) | drained_set
    result.consumed = len(consumed & puts)
    problems = result.problems
    lost = puts - consumed
    if lost:
        problems.append(f"{len(lost)} confirmed puts never consumed: {sorted(lost)[:5]}")
    unknown = (consumed - puts) - maybe_puts
    if unknown:
        problems.append(f"{len(unknown)} items that nobody put: {sorted(unknown)[:5]}")
    back = [item for item in acks if item in drained_set]
    if back:
        problems.append(f"{len(back)} acked items still in the queue: {back[:5]}")
    for item, t_ack in acks.items():
        later = [(t, pid) for t, pid in gets[item] if t > t_ack]
        if later:
            problems.append(f"{item} acked at {t_ack} was got again: {later}")
    for item, retries in delayed.items():
        for nacked_at, due in retries:
            early = [(t, pid) for t, pid in gets[item] if nacked_at < t < due]
            if early:
                problems.append(f"{item} nacked with a delay at {nacked_at}, due {due}, was "
                                f"got before its time: {early}")
    if len(drained) != len(drained_set):
        problems.append("the drain got an item twice")
    for item, seen in gets.items():
        seen.sort()
        deliveries = seen + ([(float("inf"), 0)] if item in drained_set else [])
        for _t, pid in deliveries[:-1]:
            result.duplicates += 1
            if pid not in killed and item not in released[pid]:
                problems.append(f"{item} got again though process {pid} (not killed nor "
                                "stopped) held it")

