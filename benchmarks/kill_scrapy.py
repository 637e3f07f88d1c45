"""Scrapy crawls under SIGKILL: ackqueue's add-on against Scrapy's own ``JOBDIR``, and the speed
of both on a local site with no delay.

A site of ``--pages`` pages is served on 127.0.0.1 (each page links two others, see
``tests/contrib/scrapy_crawler.py``). Each frontier's crawl is killed with SIGKILL ``--kills``
times, each time after a random number of items came through (the same random numbers for
both), resumed each time, then run to the end. Printed per frontier: kills made, pages never
fetched, pages fetched more than once, and (ackqueue) items committed other than once and the
requests in flight at the kills. Then one crawl of a fresh site with each frontier, no kills:
pages per second from the first item to the end.

    python benchmarks/kill_scrapy.py [--pages 1000] [--kills 100] [--seed 1]
        [--concurrent-items N]

Scrapy hands each response's output to ``CONCURRENT_ITEMS`` (default 100) tasks of its own;
they wait while ackqueue commits the page, so a lower value speeds the crawl up (see
docs/howto/scrapy.rst).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRIB = os.path.join(ROOT, "tests", "contrib")
sys.path.insert(0, CONTRIB)

from scrapy_crawler import Site  # noqa: E402

import ackqueue  # noqa: E402


def crawl(
    site: Site, directory: str, frontier: str, args: argparse.Namespace
) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, CONTRIB]))
    return subprocess.Popen(
        [sys.executable, os.path.join(CONTRIB, "scrapy_crawler.py"), "--port", str(site.port),
         "--dir", directory, "--frontier", frontier, "--concurrency", str(args.concurrency),
         *(["--start-dont-filter"] if args.start_dont_filter else []),
         *(["--concurrent-items", str(args.concurrent_items)] if args.concurrent_items else [])],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def campaign(frontier: str, args: argparse.Namespace, tmp: str) -> dict[str, object]:
    rng = random.Random(args.seed)
    site = Site(args.pages)
    directory = os.path.join(tmp, frontier)
    kills = in_flight = 0
    started = time.monotonic()
    try:
        while kills < args.kills:
            before = site.fetched()
            proc = crawl(site, directory, frontier, args)
            assert proc.stdout is not None
            wanted, done = rng.randint(1, args.most_between), 0
            for line in proc.stdout:
                if line.startswith("done"):
                    done += 1
                    if done == wanted:
                        proc.send_signal(signal.SIGKILL)
                        break
            rest, err = proc.communicate(timeout=600)
            if proc.returncode != -signal.SIGKILL:
                if proc.returncode != 0:
                    print(err[-2000:])
                break  # the crawl ended (for JOBDIR: often with pages never fetched)
            kills += 1
            done += rest.count("done")
            in_flight += max(0, sum((site.fetched() - before).values()) - done)
        proc = crawl(site, directory, frontier, args)
        _, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            print(err[-2000:])
    finally:
        site.close()
    fetched = site.fetched()
    result: dict[str, object] = {
        "kills": kills,
        "never fetched": args.pages - len(fetched),
        "fetched more than once": sum(1 for n in fetched.values() if n > 1),
        "extra fetches": sum(n - 1 for n in fetched.values()),
        "seconds": round(time.monotonic() - started),
    }
    if frontier == "ackqueue":
        stored = stored_items(os.path.join(directory, "frontier.fs"))
        items = Counter(item["page"] for item in stored)
        result["items not committed exactly once"] = sum(
            1 for page in range(args.pages) if items[page] != 1
        )
        result["in flight at the kills"] = in_flight
    return result


def stored_items(path: str) -> list[dict[str, object]]:
    with ackqueue.AckQueue(path, name="items") as q, q.connect() as c:
        got = []
        while True:
            try:
                got.append(c.get_nowait())
            except ackqueue.Empty:
                return got


def speed(frontier: str, args: argparse.Namespace, tmp: str) -> float:
    """Pages per second of one crawl to the end, from its first item to its last."""
    site = Site(args.pages)
    try:
        proc = crawl(site, os.path.join(tmp, f"speed-{frontier}"), frontier, args)
        assert proc.stdout is not None
        first = last = None
        for line in proc.stdout:
            if line.startswith("done"):
                last = time.monotonic()
                first = first or last
        proc.wait(timeout=1800)
    finally:
        site.close()
    assert first is not None and last is not None and last > first
    return (args.pages - 1) / (last - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8, help="CONCURRENT_REQUESTS")
    parser.add_argument("--most-between", type=int, default=8,
                        help="a kill comes after 1..N items of a run")
    parser.add_argument("--speed-runs", type=int, default=3)
    parser.add_argument("--concurrent-items", type=int, default=0,
                        help="CONCURRENT_ITEMS of both crawls (default: Scrapy's, 100)")
    parser.add_argument("--start-dont-filter", action="store_true",
                        help="the start request dont_filter, as Scrapy's default start_requests")
    args = parser.parse_args()
    _common.header("Scrapy crawls under SIGKILL: ackqueue's add-on and Scrapy's JOBDIR")
    print(f"{args.pages} pages, up to {args.kills} kills, CONCURRENT_REQUESTS={args.concurrency}, "
          f"CONCURRENT_ITEMS={args.concurrent_items or 'Scrapy default'}")
    with _common.tmpdir() as tmp:
        for frontier in ("ackqueue", "jobdir"):
            print(frontier, campaign(frontier, args, tmp), flush=True)
        rates: dict[str, list[float]] = {"ackqueue": [], "jobdir": []}
        for run in range(args.speed_runs):
            for frontier in rates:
                rates[frontier].append(speed(frontier, args, os.path.join(tmp, str(run))))
        best = {frontier: max(r) for frontier, r in rates.items()}
        for frontier, r in rates.items():
            runs = ", ".join(f"{x:.0f}" for x in r)
            print(f"{frontier}: {runs} pages/s (best {best[frontier]:.0f})")
        print(f"ackqueue / JOBDIR: {best['ackqueue'] / best['jobdir']:.2f}x (target >= 0.8x)")


if __name__ == "__main__":
    main()
