"""Kill campaign on puts by key: 100+ SIGKILLs of a process putting by key (in transactions
and out) and acking on a queue that remembers keys for ever, in one process (packing the file
between some runs) and with ``shared=True``; prints what was confirmed and checked (see
``tests/keys_campaign.py``).

    python benchmarks/kill_keys.py [--kills 100] [--seed 1] [--mode both|local|shared]
                                   [--threads 1] [--processes 1]

``--threads N`` runs N threads in each worker process, each putting by key in transactions;
``--processes N`` (shared mode) runs N worker processes at once, one killed at each kill point.
"""

from __future__ import annotations

import argparse
import os
import sys

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import keys_campaign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100, help="per mode")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mode", choices=["both", "local", "shared"], default="both")
    parser.add_argument("--threads", type=int, default=1, help="per worker process")
    parser.add_argument("--processes", type=int, default=1, help="at once, in shared mode")
    args = parser.parse_args()
    os.environ.setdefault("ACKQUEUE_SERVER_IDLE", "2")
    _common.header("Kill campaign on puts by key")
    failed = False
    for shared in {"both": [False, True], "local": [False], "shared": [True]}[args.mode]:
        with _common.tmpdir() as tmp:
            r = keys_campaign.run(os.path.join(tmp, "q.fs"), os.path.join(tmp, "log"),
                                  args.kills, ROOT, shared=shared, seed=args.seed,
                                  threads=args.threads,
                                  processes=args.processes if shared else 1)
        workers = (f"{args.processes if shared else 1} process(es) at once of {args.threads} "
                   "thread(s)")
        print(f"{'shared' if shared else 'one process'}, {workers}: {r.kills} kills, "
              f"{r.packs} packs, "
              f"{r.seconds:.0f} s; {r.confirmed_admissions} confirmed admissions, "
              f"{r.refused} refused puts, {r.taken} transactions refused with KeyTakenError, "
              f"{r.confirmed_acks} confirmed acks; at the end "
              f"{r.live_at_end} live, {r.seen_at_end} seen; problems: {len(r.problems)}")
        for problem in r.problems[:20]:
            print("  ", problem)
        failed |= bool(r.problems)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
