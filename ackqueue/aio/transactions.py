"""``async with q.transaction():`` (or ``c.transaction()``): the block's operations commit
together or not at all.

A sync transaction belongs to the thread that opened it. Its async form borrows a *lane* (one
thread, see :mod:`.running`) for the whole block and marks the task as inside it; every
awaited queue operation of that task then runs on the lane, where the transaction is open.
Leaving the block commits on the lane (one commit, one fsync), or rolls back if the block
raised, also when the task was cancelled: the gets of the block are given back in their place,
its acks and puts forgotten. A cancellation that arrives while the commit runs does not stop
it: the block's operations then either all committed or none did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, NoReturn

from ackqueue.aio.binding import plain_with_refused
from ackqueue.aio.running import (
    Lane,
    LaneLoan,
    Runner,
    current_lane,
    enter_lane,
    leave_lane,
    shielded,
)
from ackqueue.storage.transactions import Transaction, TransactionError

OpenTransaction = Callable[[], AbstractContextManager[Transaction]]


class AsyncTransaction:
    def __init__(self, open_transaction: OpenTransaction, runner: Runner) -> None:
        self._open = open_transaction
        self._runner = runner
        self._lane: Lane | None = None
        self._context: AbstractContextManager[Transaction] | None = None
        self._loan: LaneLoan | None = None
        self._token: Any = None

    async def __aenter__(self) -> Transaction:
        if current_lane() is not None:
            raise TransactionError("this task is already inside a transaction; they do not nest")
        runner = self._runner
        lane = await runner.borrow_lane()
        context = self._open()
        future = asyncio.get_running_loop().run_in_executor(lane.executor, context.__enter__)
        try:
            tx = await asyncio.shield(future)
        except BaseException:
            # Opened on the lane, or about to be: close it there (nothing was done in it yet).
            def close_and_give_back(opened: asyncio.Future[Transaction]) -> None:
                if opened.cancelled() or opened.exception() is not None:
                    runner.give_back_lane(lane)
                    return
                lane.executor.submit(_close_quietly, context).add_done_callback(
                    lambda _: runner.give_back_lane(lane)
                )

            future.add_done_callback(close_and_give_back)
            raise
        self._lane, self._context = lane, context
        self._loan, self._token = enter_lane(lane)
        return tx

    def __enter__(self) -> NoReturn:
        plain_with_refused("an AsyncTransaction", "q.transaction():")

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: ``__enter__`` raises (a ``with`` needs both to call it)."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        lane, context = self._lane, self._context
        assert lane is not None and context is not None and self._loan is not None
        leave_lane(self._loan, self._token)
        self._lane = self._context = None
        runner = self._runner
        def leave() -> bool:
            return bool(context.__exit__(exc_type, exc, tb))

        future = asyncio.get_running_loop().run_in_executor(lane.executor, leave)
        future.add_done_callback(lambda _: runner.give_back_lane(lane))
        return await shielded(future)


def _close_quietly(context: AbstractContextManager[Transaction]) -> None:
    """Leave a transaction nothing was done in (its task was cancelled as it opened)."""
    context.__exit__(None, None, None)
