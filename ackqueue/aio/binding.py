"""Which event loop and task an async object belongs to, and the errors for using it elsewhere.

A future belongs to one event loop, and the give-back of an async consumer's holds is tied to
the task that connected it (as a sync consumer's is to its thread). Used from another loop, or
got with from another task, the object would break those promises silently; it raises instead,
before anything is taken or changed.
"""

from __future__ import annotations

import asyncio

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

    def check_task(self, verb: str) -> None:
        """Only the owning task may take items: its end is what gives them back."""
        self.check_loop()
        task = asyncio.current_task()
        if task is not self.task:
            raise AsyncUsageError(
                f"{verb}: {self.what} belongs to task {self.task.get_name()!r}, and what it "
                f"holds goes back when that task ends; task "
                f"{task.get_name() if task else None!r} would hold items nobody gives back if "
                "it failed. Call q.connect() in each task that gets (acks may come from any "
                "task)"
            )
