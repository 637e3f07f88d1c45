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

from ackqueue.aio import (
    AsyncAckQueue,
    AsyncConsumer,
    AsyncLifoAckQueue,
    AsyncPriorityAckQueue,
)
from ackqueue.aio.pool import AsyncWorkerPool
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
