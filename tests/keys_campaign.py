"""A kill campaign on puts by key: worker processes (one at a time, or several with
``shared=True``; each with one thread or several) run a crawler's step (get a
key, and in one transaction ack it and put links by key), plain puts by key and acks, on a
queue whose keys are remembered for ever; the campaign SIGKILLs it at a point chosen from its
log (after a random number of confirmed events, or mid-way to the next), restarts it, and in
one-process mode packs the file between some runs. Afterwards the queue is drained and checked:

* no key was admitted twice (a put by key returned True, or its transaction committed, twice),
  so never while live and never again once seen;
* every confirmed put by key is still live or seen at the end; every confirmed ack is seen and
  no longer live; no live item's key is also seen, and no key is live twice.

The worker appends one line per confirmed event to its log, flushed at once (the kernel keeps
what was written when the process is SIGKILLed). Used by ``tests/keys/test_keys_kills.py``
(a few kills) and ``benchmarks/kill_keys.py`` (100+).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from campaign_children import env_at, start_child, stderr_tail

KEYS = 4000  # the key space: links pick from it, so many are put again after they were seen

WORKER = r"""
import os, random, sys, threading
import ackqueue

path, log_path, seed, shared = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
threads = int(sys.argv[5])
log = open(log_path, "a", buffering=1)
log_lock = threading.Lock()
q = ackqueue.AckQueue(path, unique="forever", shared=shared or None, session_timeout=2)
print("open", flush=True)

def note(line):
    with log_lock:  # one line a write: the threads' lines never mix
        log.write(line + "\n")

def work(rng):
    c = q.connect()

    def links():
        return [f"k{rng.randrange(KEYS)}" for _ in range(rng.randint(1, 3))]

    while True:
        roll = rng.random()
        if roll < 0.5:
            try:
                page = c.get_nowait()
            except ackqueue.Empty:
                keys = links()
                got = q.put_many(keys, keys=keys)
                note("put " + " ".join(f"{k}:{int(g)}" for k, g in zip(keys, got)))
                continue
            keys = links()
            try:
                with c.transaction():
                    c.ack(page)
                    got = [q.put(k, key=k) for k in keys]
            except ackqueue.KeyTakenError:
                # Another thread or process put one of these keys first: nothing of the block
                # was stored, the page is still held. Give it back for another go.
                c.nack(page)
                note(f"taken {page}")
                continue
            note(f"tx {page} " + " ".join(f"{k}:{int(g)}" for k, g in zip(keys, got)))
        elif roll < 0.8:
            keys = links()
            got = q.put_many(keys, keys=keys)
            note("put " + " ".join(f"{k}:{int(g)}" for k, g in zip(keys, got)))
        else:
            try:
                item = c.get_nowait()
            except ackqueue.Empty:
                continue
            c.ack(item)
            note(f"ack {item}")

workers = [threading.Thread(target=work, args=(random.Random(seed + n),), daemon=True)
           for n in range(threads)]
for t in workers:
    t.start()
for t in workers:
    t.join()
""".replace("KEYS", str(KEYS))

FINAL = r"""
import sys
import ackqueue
path, shared = sys.argv[1], sys.argv[2] == "1"
with ackqueue.AckQueue(path, shared=shared or None, session_timeout=2) as q, q.connect() as c:
    live = []
    while True:
        try:
            live.append(c.get(timeout=6 if shared else 0.5))
        except ackqueue.Empty:
            break
    seen = [k for k in (f"k{i}" for i in range(KEYS)) if q.seen(k)]
    for item in live:
        c.nack(item)
print("live", *live)
print("seen", *seen)
""".replace("KEYS", str(KEYS))


@dataclass
class Result:
    kills: int = 0
    packs: int = 0
    confirmed_admissions: int = 0
    confirmed_acks: int = 0
    refused: int = 0
    taken: int = 0  # transactions that failed with KeyTakenError (nothing of them stored)
    live_at_end: int = 0
    seen_at_end: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def _lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]


def run(path: str, log_path: str, kills: int, root: str, shared: bool, seed: int = 0,
        threads: int = 1, processes: int = 1) -> Result:
    """Run the campaign on queue file ``path`` with ``kills`` SIGKILLs; the checked result.

    Each worker process runs ``threads`` threads, each with its consumer; with ``shared``,
    ``processes`` workers run at once (one is killed at each kill point and replaced), so
    puts of one key race in transactions across threads and processes."""
    assert shared or processes == 1, "one process opens a file queue without shared=True"
    rng = random.Random(seed)
    env = env_at(root)
    result = Result()
    started = time.monotonic()
    flag = "1" if shared else "0"

    def start() -> subprocess.Popen[str]:
        return start_child(WORKER, [path, log_path, str(rng.randrange(1 << 30)), flag,
                                    str(threads)], env, stderr_path=log_path + ".stderr")

    procs = [start() for _ in range(processes)]
    try:
        for k in range(kills):
            # The kill point: after a chosen number of confirmed events, or mid-way to the
            # next one (the process is then inside a put, a get, an ack or a commit).
            target = len(_lines(log_path)) + rng.randint(1, 25)
            deadline = time.monotonic() + 60
            while len(_lines(log_path)) < target and all(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.001)
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0, 0.004))
            ended = [p for p in procs if p.poll() is not None]
            if ended:
                result.problems.append(
                    f"a worker ended by itself: {stderr_tail(log_path + '.stderr')}"
                )
                break
            victim = rng.choice(procs)
            victim.send_signal(signal.SIGKILL)
            victim.wait(30)
            procs.remove(victim)
            result.kills += 1
            if not shared and k % 5 == 4:
                _pack(path, env)
                result.packs += 1
            procs.append(start())
    finally:
        for p in procs:  # the campaign is over: these are not counted as kills
            p.send_signal(signal.SIGKILL)
            p.wait(30)
    final = subprocess.run([sys.executable, "-c", FINAL, path, flag], env=env,
                           capture_output=True, text=True, timeout=300)
    if final.returncode != 0:
        result.problems.append(f"the final drain failed: {final.stderr[-2000:]}")
        return result
    out = dict(line.split(" ", 1) if " " in line else (line, "")
               for line in final.stdout.splitlines())
    result.seconds = time.monotonic() - started
    _check(_lines(log_path), out["live"].split(), set(out["seen"].split()), result)
    return result


def _pack(path: str, env: dict[str, str]) -> None:
    code = "import sys, ackqueue\nwith ackqueue.AckQueue(sys.argv[1]) as q: q.pack()"
    subprocess.run([sys.executable, "-c", code, path], env=env, check=True, timeout=120)


def _check(log: list[str], live: list[str], seen: set[str], result: Result) -> None:
    admitted: Counter[str] = Counter()
    acked: set[str] = set()
    for line in log:
        words = line.split()
        if words[0] == "taken":
            result.taken += 1
            continue
        if words[0] == "tx":
            acked.add(words[1])
            outcomes = words[2:]
        elif words[0] == "ack":
            acked.add(words[1])
            continue
        else:
            outcomes = words[1:]
        for outcome in outcomes:
            key, stored = outcome.rsplit(":", 1)
            if stored == "1":
                admitted[key] += 1
            else:
                result.refused += 1
    result.confirmed_admissions = sum(admitted.values())
    result.confirmed_acks = len(acked)
    result.live_at_end, result.seen_at_end = len(live), len(seen)
    problems = result.problems
    problems += [f"key {k} admitted {n} times" for k, n in admitted.items() if n > 1]
    live_count = Counter(live)
    problems += [f"key {k} live {n} times at the end" for k, n in live_count.items() if n > 1]
    problems += [f"key {k} both live and seen at the end" for k in live_count if k in seen]
    problems += [f"confirmed put of {k} lost (neither live nor seen)"
                 for k in admitted if k not in live_count and k not in seen]
    problems += [f"confirmed ack of {k} lost" for k in acked
                 if k not in seen or k in live_count]
