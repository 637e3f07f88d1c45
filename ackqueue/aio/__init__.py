"""The asyncio layer: :class:`AsyncAckQueue` and its twins, their consumers and
:class:`AsyncWorkerPool`, the sync API awaited. It owns no second core: it wraps the sync
queues of :mod:`ackqueue.queue`.

No thread waits for an item on a task's behalf: the core tells its ready listeners
(:mod:`ackqueue.delivery.conditions`) when items become ready, and a waiting coroutine is a
future (:mod:`.waiting`). Only commits (fsync) run on threads, a bounded pool owned by each
queue (:mod:`.running`); a take that commits nothing (the queue's mode says when) runs on the
loop itself. The queues (:mod:`.queues`), the consumer of one task (:mod:`.consumer`),
transactions on a lane of their own (:mod:`.transactions`), which loop and task an object
belongs to (:mod:`.binding`), and the pool with its feeders and signal handlers
(:mod:`.pool`).

May import :mod:`ackqueue.queue`, :mod:`ackqueue.workers` (the pool's public types),
:mod:`ackqueue.delivery`, :mod:`ackqueue.storage` and :mod:`ackqueue.errors`; nothing in the
package imports it but ``ackqueue/__init__.py``.
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
