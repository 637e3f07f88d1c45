"""Puts by key (issue 12): memory for a million keys, puts of seen keys, and the cost of a key.

    python benchmarks/bench_keys.py [--n 1000000] [--batch 1000] [--runs 3]

1. ``--n`` distinct keys put in batches of ``--batch`` (``unique="forever"``); the process's
   RSS at the end (target: at most 200 MB for 1,000,000; the key index and seen-set are
   BTrees on disk, so what grows in RAM is the queue's in-memory ready index).
2. The first tenth of them drained (plain gets: done, so seen), then put again in batches:
   puts of seen keys per second (target: at least 20,000/s), and of live keys.
3. ``put_many`` by key against ``put_many`` without a key, and single ``put`` by key against
   single ``put``, each on fresh files, alternated ``--runs`` times; the median ratio
   (target: a key costs at most 1.3x).
4. A held ``get`` and its ``ack`` of items put earlier in the same session, by key
   (``unique="forever"``: the ack moves the key to the seen-set) and without: CPU an item
   (``time.process_time``), medians of the same runs. What a crawler's frontier does with the
   requests it found.

Every batch is one durable commit (fsync on). Step 1 runs first, in a fresh process, so the RSS
is that of the keyed queue alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import _common

from ackqueue import AckQueue

SINGLE_PUTS = 1000  # single puts per run of step 3 (each is one fsynced commit)


def keys_in(start: int, stop: int) -> list[str]:
    return [f"https://host{i % 997}.example/page/{i}" for i in range(start, stop)]


def million(n: int, batch: int) -> None:
    """Steps 1 and 2, printed as one line of ``name=value`` (run in a child process)."""
    with _common.tmpdir() as tmp:
        path = os.path.join(tmp, "keys.fs")
        with AckQueue(path, unique="forever") as q:
            began = time.perf_counter()
            for i in range(0, n, batch):
                keys = keys_in(i, min(n, i + batch))
                q.put_many(keys, keys=keys)
            put_s = time.perf_counter() - began
            rss = _common.rss_mb()
            file_mb = os.path.getsize(path) / 1e6
            tenth = max(batch, n // 10)
            for _ in range(tenth):
                q.get_nowait()
            began = time.perf_counter()
            for i in range(0, tenth, batch):
                keys = keys_in(i, i + batch)
                assert not any(q.put_many(keys, keys=keys) or [])
            seen_s = time.perf_counter() - began
            began = time.perf_counter()
            for i in range(tenth, 2 * tenth, batch):
                keys = keys_in(i, i + batch)
                assert not any(q.put_many(keys, keys=keys) or [])
            live_s = time.perf_counter() - began
    print(f"put_rate={n / put_s:.0f} rss_mb={rss:.1f} file_mb={file_mb:.1f} "
          f"seen_rate={tenth / seen_s:.0f} live_rate={tenth / live_s:.0f}")


def batched(tmp: str, n: int, batch: int, keyed: bool) -> float:
    path = os.path.join(tmp, f"b{time.monotonic_ns()}.fs")
    with AckQueue(path) as q:
        began = time.perf_counter()
        for i in range(0, n, batch):
            keys = keys_in(i, i + batch)
            if keyed:
                q.put_many(keys, keys=keys)
            else:
                q.put_many(keys)
        return n / (time.perf_counter() - began)


def single(tmp: str, keyed: bool) -> float:
    path = os.path.join(tmp, f"s{time.monotonic_ns()}.fs")
    with AckQueue(path) as q:
        keys = keys_in(0, SINGLE_PUTS)
        began = time.perf_counter()
        for key in keys:
            if keyed:
                q.put(key, key=key)
            else:
                q.put(key)
        return SINGLE_PUTS / (time.perf_counter() - began)


def taken(tmp: str, keyed: bool) -> float:
    """CPU us of a held get and its ack, of SINGLE_PUTS items put just before."""
    path = os.path.join(tmp, f"g{time.monotonic_ns()}.fs")
    with AckQueue(path, unique="forever") as q, q.connect() as c:
        keys = keys_in(0, SINGLE_PUTS)
        for key in keys:
            if keyed:
                q.put(key, key=key)
            else:
                q.put(key)
        began = time.process_time()
        for _ in keys:
            c.ack(c.get_nowait())
        return (time.process_time() - began) / SINGLE_PUTS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--million-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.million_child:
        million(args.n, args.batch)
        return
    _common.header("Puts by key")
    child = subprocess.run([sys.executable, __file__, "--million-child", "--n", str(args.n),
                            "--batch", str(args.batch)], capture_output=True, text=True,
                           check=True)
    got = dict(word.split("=") for word in child.stdout.split())
    print(f"1. {args.n:,} distinct keys in batches of {args.batch}: "
          f"{float(got['put_rate']):,.0f} puts/s; RSS at the end {got['rss_mb']} MB "
          f"(target <= 200 MB for 1,000,000); file {got['file_mb']} MB")
    print(f"2. puts of seen keys in batches: {float(got['seen_rate']):,.0f}/s (target >= "
          f"20,000/s); of live keys: {float(got['live_rate']):,.0f}/s")
    n3 = min(args.n, 100_000)
    ratios: dict[str, list[float]] = {"put_many": [], "put": []}
    rates: dict[str, list[float]] = {k: [] for k in ("many_plain", "many_key", "one_plain",
                                                     "one_key", "get_plain", "get_key")}
    with _common.tmpdir() as tmp:
        for _ in range(args.runs):
            plain, keyed = batched(tmp, n3, args.batch, False), batched(tmp, n3, args.batch, True)
            rates["many_plain"].append(plain)
            rates["many_key"].append(keyed)
            ratios["put_many"].append(plain / keyed)
            plain, keyed = single(tmp, False), single(tmp, True)
            rates["one_plain"].append(plain)
            rates["one_key"].append(keyed)
            ratios["put"].append(plain / keyed)
            rates["get_plain"].append(taken(tmp, False))
            rates["get_key"].append(taken(tmp, True))
    med = {k: _common.median(v) for k, v in rates.items()}
    print(f"3. put_many of {n3:,} in batches of {args.batch}: {med['many_plain']:,.0f}/s "
          f"without keys, {med['many_key']:,.0f}/s by key; cost ratio (median of "
          f"{args.runs}) {_common.median(ratios['put_many']):.2f}x (target <= 1.3x)")
    print(f"   single puts ({SINGLE_PUTS} each): {med['one_plain']:,.0f}/s without keys, "
          f"{med['one_key']:,.0f}/s by key; cost ratio {_common.median(ratios['put']):.2f}x "
          "(target <= 1.3x)")
    print(f"4. get + ack of {SINGLE_PUTS} items put in the same session: "
          f"{med['get_plain']:,.0f} us of CPU an item without keys, {med['get_key']:,.0f} by "
          f"key ({med['get_key'] / med['get_plain']:.2f}x)")


if __name__ == "__main__":
    main()
