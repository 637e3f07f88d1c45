"""Filesystem and local-user fault campaign: a full filesystem, a vanishing one, and a second
Unix user, each move made many times at random moments of a running queue's workload (one
process, or ``shared=True``), each outcome classified (see ``tests/fs_campaign.py``).

    python benchmarks/fs_faults.py [--tries 20] [--seed 1] [--moves full,vanish,user]
                                   [--mode both|local|shared]

Needs root (it mounts small tmpfs filesystems and runs a child as uid 65534); a move that
cannot run here is skipped with the reason. Exits 1 on any loss, hang, followed link,
connection to the other user's socket, unclear error, or queue that did not recover.
"""

from __future__ import annotations

import argparse
import os
import sys

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import fs_campaign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=20, help="per move and mode")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--moves", default=",".join(fs_campaign.MOVES))
    parser.add_argument("--mode", choices=["both", "local", "shared"], default="both")
    args = parser.parse_args()
    os.environ.setdefault("ACKQUEUE_SERVER_IDLE", "1")
    _common.header("Fault campaign: a full filesystem, a vanishing one, a second user")
    failed = False
    for move in args.moves.split(","):
        for shared in {"both": [False, True], "local": [False], "shared": [True]}[args.mode]:
            with _common.tmpdir() as tmp:
                try:
                    r = fs_campaign.run(move, tmp, args.tries, ROOT, shared, args.seed)
                except fs_campaign.Unavailable as exc:
                    print(f"{move}: skipped: {exc}")
                    break
            print(r.summary(), flush=True)
            for outcome, lines in r.examples.items():
                for line in lines:
                    print(f"   {outcome}: {line[:600]}")
            failed |= r.failed
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
