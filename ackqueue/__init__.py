"""ackqueue: a durable ``queue.Queue`` with acknowledgements, built on ZODB.

>>> import ackqueue
>>> q = ackqueue.AckQueue()          # in memory; pass a file path to make it durable
>>> q.put("job")
>>> with q.connect() as c:
...     job = c.get()
...     c.ack(job)
>>> q.qsize(), q.unacked_count()
(0, 0)
"""

import importlib
from typing import TYPE_CHECKING, Any

from ackqueue.base.clock import ManualClock
from ackqueue.delivery.holds import Delivery
from ackqueue.errors import (
    AckQueueError,
    AsyncUsageError,
    DamagedFileError,
    Empty,
    Full,
    ItemLoadError,
    KeyHeldError,
    KeyTakenError,
    KeyTypeError,
    LeaseExpiredError,
    NotAQueueFileError,
    NotHeldError,
    QueueClosedError,
    QueueLockedError,
    SerializerMismatchError,
    ShutDown,
    StorageError,
    StorageUnreachableError,
    UnknownKeyError,
    UnpicklableItemError,
    UnsafeRecordError,
    WorkerProcessError,
)
from ackqueue.queue.consumer import Consumer
from ackqueue.queue.metrics import PrometheusCollector, QueueMetrics
from ackqueue.queue.queues import AckQueue, LifoAckQueue, PriorityAckQueue
from ackqueue.records import restricted_class_factory
from ackqueue.storage.deadletters import DeadLetter, UnloadableItem
from ackqueue.storage.transactions import TransactionError
from ackqueue.workers.pool import PoolStats, Retry, WorkerPool
from ackqueue.workers.processes import ProcessPool

if TYPE_CHECKING:
    from ackqueue.aio import (
        AsyncAckQueue,
        AsyncConsumer,
        AsyncLifoAckQueue,
        AsyncPriorityAckQueue,
    )
    from ackqueue.aio.pool import AsyncWorkerPool

# The asyncio API is imported when first named (``ackqueue.AsyncAckQueue``): importing
# asyncio (and what it imports) costs about a fifth of a second of CPU at the start of every
# program, worker process and command-line call, most of which never use it.
_ASYNC = {
    "AsyncAckQueue": "ackqueue.aio",
    "AsyncConsumer": "ackqueue.aio",
    "AsyncLifoAckQueue": "ackqueue.aio",
    "AsyncPriorityAckQueue": "ackqueue.aio",
    "AsyncWorkerPool": "ackqueue.aio.pool",
}


def __getattr__(name: str) -> Any:
    module = _ASYNC.get(name)
    if module is None:
        raise AttributeError(f"module 'ackqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ASYNC))

__all__ = [
    "AckQueue",
    "AckQueueError",
    "AsyncAckQueue",
    "AsyncConsumer",
    "AsyncLifoAckQueue",
    "AsyncPriorityAckQueue",
    "AsyncUsageError",
    "DamagedFileError",
    "AsyncWorkerPool",
    "Consumer",
    "DeadLetter",
    "Delivery",
    "Empty",
    "Full",
    "ItemLoadError",
    "KeyHeldError",
    "KeyTakenError",
    "KeyTypeError",
    "LeaseExpiredError",
    "LifoAckQueue",
    "ManualClock",
    "NotAQueueFileError",
    "NotHeldError",
    "PoolStats",
    "PriorityAckQueue",
    "ProcessPool",
    "PrometheusCollector",
    "QueueMetrics",
    "QueueClosedError",
    "QueueLockedError",
    "ShutDown",
    "Retry",
    "SerializerMismatchError",
    "StorageError",
    "StorageUnreachableError",
    "TransactionError",
    "UnknownKeyError",
    "UnloadableItem",
    "UnpicklableItemError",
    "UnsafeRecordError",
    "WorkerPool",
    "WorkerProcessError",
    "restricted_class_factory",
]
__version__ = "0.1.0"
