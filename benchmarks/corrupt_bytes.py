"""Corruption campaign: thousands of random one-byte changes of a queue file, each copy then
read as a user would (``ackqueue stats``, open, get and ack all, dead letters), and the outcome
classified: intact, clear error (``DamagedFileError`` or a logged error naming the file and
``ackqueue salvage``), altered (read back with other content: FileStorage keeps no checksums),
loss (a confirmed item missing with no clear error) or internal (any other exception). Where an
error says to run ``ackqueue salvage FILE --into NEW``, it is run and what it put back counted.
One file closed cleanly, one whose writer was SIGKILLed (its index stale); see
``tests/corruption_campaign.py``.

    python benchmarks/corrupt_bytes.py [--trials 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import sys

import _common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import corruption_campaign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000, help="per file")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    _common.header("Corruption campaign: random one-byte changes of a queue file")
    failed = False
    for killed in (False, True):
        with _common.tmpdir() as tmp:
            r = corruption_campaign.run(tmp, ROOT, args.trials, args.seed, killed)
        print(f"{'killed writer' if killed else 'closed cleanly'}: {args.trials} one-byte "
              f"changes, {r.seconds:.0f} s: {r.summary()}")
        for outcome in ("internal", "loss", "altered"):
            for line in r.examples.get(outcome, []):
                print(f"   {outcome}: {line[:400]}")
        failed |= bool(r.counts["internal"] or r.counts["loss"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
