"""``python -m ackqueue``: the same as the ``ackqueue`` command (see :mod:`ackqueue.cli`)."""

from __future__ import annotations

import sys

from ackqueue.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
