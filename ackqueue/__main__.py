"""The ``ackqueue`` command line: ``python -m ackqueue demo``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ackqueue", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="a short tour: crashes and restarts lose nothing")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo()
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
