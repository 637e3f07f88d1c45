"""Kill campaign on ``AckQueue(path, shared=True)``: 100+ SIGKILLs of workers (the server's
starter among them) and of the server, at random moments of a mixed workload; prints what was
confirmed and checked (see ``tests/shared_campaign.py``).

    python benchmarks/kill_shared.py [--kills 100] [--stops 0] [--workers 3] [--seed 1]
                                     [--engine zeo]

``--stops N`` adds N SIGSTOPs of a worker past its session's lease, each followed by SIGCONT
(the stopped worker's later acks must fail, and it must never get an item acked meanwhile).

``--engine postgresql`` runs it on ``AckQueue("postgresql://...")`` against a PostgreSQL server
started for the run (as ``tests/postgres_server.py`` starts one); there only the clients are
killed, the server being PostgreSQL's own to keep.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import shared_campaign  # noqa: E402


@contextlib.contextmanager
def queue_at(engine: str, tmp: str) -> Iterator[tuple[str, float]]:
    """Where the campaign's queue is, and the share of kills that go to the server."""
    if engine == "zeo":
        yield os.path.join(tmp, "q.fs"), 0.35
        return
    from postgres_server import running, why_unavailable

    reason = why_unavailable()
    if reason is not None:
        sys.exit(f"no PostgreSQL: {reason}")
    with running() as server:
        yield server.new_database(), 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--stops", type=int, default=0, help="SIGSTOPs past the lease")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engine", choices=["zeo", "postgresql"], default="zeo")
    args = parser.parse_args()
    os.environ.setdefault("ACKQUEUE_SERVER_IDLE", "2")
    with _common.tmpdir() as tmp, queue_at(args.engine, tmp) as (where, server_share):
        logs = os.path.join(tmp, "logs")
        os.mkdir(logs)
        r = shared_campaign.run(where, logs, args.kills, ROOT, workers=args.workers,
                                seed=args.seed, server_share=server_share, stops=args.stops)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.engine}: {r.kills} kills "
          f"({r.server_kills} of the server, {r.kills - r.server_kills} of workers, the "
          f"server's starter {'among them' if r.starter_killed else 'not among them'}), "
          f"{r.stops} SIGSTOPs past the lease then SIGCONT, in "
          f"{r.seconds:.0f} s; {r.confirmed_puts} confirmed puts, all consumed: "
          f"{r.consumed == r.confirmed_puts}; {r.confirmed_acks} confirmed acks; "
          f"{r.drained} left for the final drain; {r.duplicates} deliveries again, each from "
          "a killed or stopped holder or a given-back item")
    print("problems:", r.problems or "none")
    sys.exit(1 if r.problems else 0)


if __name__ == "__main__":
    main()
