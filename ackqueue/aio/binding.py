"""Which event loop and task an async object belongs to, and the errors for using it wrongly.

A future belongs to one event loop: used from another loop, an async object raises before
anything is taken or changed. The give-back of an async consumer's holds is tied to the task
that connected it (as a sync consumer's is to its thread); tasks it starts (``wait_for``,
``gather``, ``ensure_future``) may get with it, and what they get is the consumer's.
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from ackqueue.errors import AsyncUsageError


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise AsyncUsageError(
            f"{what} needs a running event loop: call it inside a coroutine (asyncio.run(...)); "
            "from plain threads, use the sync queue (q.sync)"
        ) from None


class Binding:
    """The loop and task current where ``what`` was made."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.loop = running_loop(what)
        task = asyncio.current_task()
        if task is None:
            raise AsyncUsageError(
                f"{what} must be made inside a task (a coroutine run by asyncio), which it "
                "then belongs to"
            )
        self.task = task

    def check_loop(self) -> None:
        loop = running_loop(self.what)
        if loop is not self.loop:
            raise AsyncUsageError(
                f"{self.what} belongs to the event loop it was made on, and this is another "
                "one; make a new one on this loop (q.connect() in this loop's task)"
            )


def plain_with_refused(what: str, spelled: str) -> NoReturn:
    """``with`` where ``async with`` is meant: say which, instead of Python's generic error."""
    raise AsyncUsageError(
        f"{what} is an async context manager: write 'async with {spelled}' inside a coroutine "
        "(a plain 'with' would leave its closing undone)"
    )
