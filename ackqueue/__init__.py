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

from .clock import ManualClock
from .consumer import Consumer
from .deadletters import DeadLetter, UnloadableItem
from .errors import (
    AckQueueError,
    Empty,
    Full,
    ItemLoadError,
    LeaseExpiredError,
    NotAQueueFileError,
    NotHeldError,
    QueueClosedError,
    QueueLockedError,
    ShutDown,
    StorageError,
    UnpicklableItemError,
)
from .holds import Delivery
from .pool import PoolStats, Retry, WorkerPool
from .queue import AckQueue, LifoAckQueue, PriorityAckQueue
from .transactions import TransactionError

__all__ = [
    "AckQueue",
    "AckQueueError",
    "Consumer",
    "DeadLetter",
    "Delivery",
    "Empty",
    "Full",
    "ItemLoadError",
    "LeaseExpiredError",
    "LifoAckQueue",
    "ManualClock",
    "NotAQueueFileError",
    "NotHeldError",
    "PoolStats",
    "PriorityAckQueue",
    "QueueClosedError",
    "QueueLockedError",
    "ShutDown",
    "Retry",
    "StorageError",
    "TransactionError",
    "UnloadableItem",
    "UnpicklableItemError",
    "WorkerPool",
]
__version__ = "0.1.0"
