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

from .consumer import Consumer
from .errors import (
    AckQueueError,
    Empty,
    Full,
    ItemLoadError,
    NotAQueueFileError,
    NotHeldError,
    QueueClosedError,
    QueueLockedError,
    StorageError,
    UnpicklableItemError,
)
from .holds import Delivery
from .pool import PoolStats, Retry, WorkerPool
from .queue import AckQueue, LifoAckQueue, PriorityAckQueue

__all__ = [
    "AckQueue",
    "AckQueueError",
    "Consumer",
    "Delivery",
    "Empty",
    "Full",
    "ItemLoadError",
    "LifoAckQueue",
    "NotAQueueFileError",
    "NotHeldError",
    "PoolStats",
    "PriorityAckQueue",
    "QueueClosedError",
    "QueueLockedError",
    "Retry",
    "StorageError",
    "UnpicklableItemError",
    "WorkerPool",
]
__version__ = "0.1.0"
