"""The asyncio layer: :class:`AsyncAckQueue` and its twins, their consumers and
:class:`AsyncWorkerPool`, on top of the sync queues (:mod:`ackqueue.queue`) and the worker
pool's public types (:mod:`ackqueue.workers`).

No thread waits for an item on a task's behalf: the core tells its ready listeners
(:mod:`ackqueue.delivery.signals`) when items become ready, and a waiting coroutine is a
future. Only commits (fsync) run on threads, a bounded pool owned by each queue.
"""

from ackqueue.aio.consumer import AsyncConsumer
from ackqueue.aio.queues import AsyncAckQueue, AsyncLifoAckQueue, AsyncPriorityAckQueue
from ackqueue.aio.transactions import AsyncTransaction

__all__ = [
    "AsyncAckQueue",
    "AsyncConsumer",
    "AsyncLifoAckQueue",
    "AsyncPriorityAckQueue",
    "AsyncTransaction",
]
