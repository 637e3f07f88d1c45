"""Globals with a side effect, for crafted records: loading one of them leaves a marker file.

A test stores a record whose state names one of these (or ``os.system``) and checks that
opening, reading and consuming the queue leaves no marker: nothing of the record was run.
"""

from __future__ import annotations

from typing import Any


def touch(path: str) -> str:
    """Write the marker file ``path``: whoever calls this ran the crafted record's code."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("ran")
    return path


class Trap:
    """A class whose construction writes the marker file it is given."""

    def __init__(self, path: str) -> None:
        touch(path)


class Call:
    """Pickles as a call of ``fn(*args)``: what a crafted pickle runs when it is loaded."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.fn, self.args
