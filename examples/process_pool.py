"""A pool of worker processes for CPU-bound jobs: each process opens the queue with
``shared=True`` and runs the handler in a thread of its own, so the jobs run on every core,
past the GIL. A worker process killed at any moment loses nothing: what it held goes back to
the others once its session lease (5 s here) runs out, and the pool starts another process.

    python3 examples/process_pool.py pages.fs [--processes 2]

It puts 200 "pages" (stand-ins for downloaded HTML), parses them in the pool until the queue
is empty, and says how many were parsed. Ctrl-C stops it gracefully (a second one at once).
"""

import argparse
import hashlib
import sys

import ackqueue


def parse(page):
    """The handler: CPU work on one page (here, hashing it over and over). It is defined at
    the top level of the script, so that worker processes can import it."""
    digest = page["html"].encode()
    for _ in range(2000):
        digest = hashlib.sha256(digest).digest()


if __name__ == "__main__":  # worker processes import this file: only the parent runs this
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", default="pages.fs", help="the queue file")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    args = parser.parse_args()
    path, processes = args.path, args.processes
    with ackqueue.AckQueue(path, name="pages", shared=True) as pages:
        pages.put_many([{"url": f"https://example.org/{n}", "html": f"<p>page {n}</p>"}
                        for n in range(200)])
    pool = ackqueue.ProcessPool(path, parse, processes=processes, name="pages",
                                queue_options={"session_timeout": 5})
    stats = pool.run_until_empty()
    print(f"{stats.done} pages parsed by {processes} processes, {stats.failed} failed")
    sys.exit(stats.exit_code)
