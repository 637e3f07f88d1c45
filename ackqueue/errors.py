"""The exceptions ackqueue raises.

``Empty`` and ``Full`` are the standard library's own classes, so ``except queue.Empty`` and
``except ackqueue.Empty`` catch the same thing. Everything else derives from
:class:`AckQueueError` and from the built-in exception a caller would already expect.
"""

from __future__ import annotations

import queue

Empty = queue.Empty
Full = queue.Full


class AckQueueError(Exception):
    """Base class of ackqueue's own errors."""


class NotHeldError(AckQueueError, ValueError):
    """An ack or nack named something this consumer does not hold."""


class LeaseExpiredError(NotHeldError):
    """The item was held longer than ``ack_timeout`` and went back to the queue (fencing)."""


class UnpicklableItemError(AckQueueError, TypeError):
    """The item given to put cannot be pickled, so it cannot be stored."""


class ItemLoadError(AckQueueError):
    """A stored item could not be unpickled (its class was renamed or removed)."""


class QueueClosedError(AckQueueError, ValueError):
    """The queue or consumer was closed."""


class StorageError(AckQueueError, OSError):
    """The storage could not be opened or written; the message says which file and why."""


class StorageUnreachableError(StorageError):
    """The storage's server could not be reached, or dropped the connection during the call
    (a ZEO server that restarted or ended this process's commit, a database that went down).
    A get or a read may be tried again; a commit's outcome is unknown (as for any commit that
    fails without an answer), so a put tried again may store its item twice."""


class QueueLockedError(StorageError):
    """The storage file is held open by another process."""


class NotAQueueFileError(StorageError):
    """The file is not a ZODB FileStorage, or holds something other than ackqueue queues."""


class DamagedFileError(StorageError):
    """The queue file is damaged: a record of it, or its structure, cannot be read back as it
    was written (a changed byte, a disk error). The message names the file and the record or
    offset, and says what to do: keep a copy, and ``ackqueue salvage`` puts what can still be
    read into a new queue file."""


def damaged_message(where: str, what: str) -> str:
    """What a :class:`DamagedFileError` says: the file, what of it is damaged, and what to do."""
    return (
        f"queue file {where} is damaged: {what}. Keep a copy of it as it is; "
        f"`ackqueue salvage {where} --into NEW` puts every item that can still be read into the "
        "new queue file NEW"
    )


class UnsafeRecordError(NotAQueueFileError):
    """A stored record names a global that no queue file holds (a function such as
    ``os.system``, a class of another module): the record was not written by ackqueue, and
    nothing of it was loaded or run. The message names the record where ackqueue knows it."""


class SerializerMismatchError(AckQueueError, ValueError):
    """The queue was opened with another serializer than the one its stored record names."""


# Python 3.13 added queue.ShutDown; ackqueue raises its own subclass of it there, and the same
# class (without that base) on older Pythons, so ``except ackqueue.ShutDown`` works everywhere.
_StdShutDown: type[Exception] = getattr(queue, "ShutDown", Exception)


class ShutDown(AckQueueError, _StdShutDown):  # type: ignore[valid-type,misc]
    """The queue was shut down: no more puts, and no more gets once nothing is ready."""


class WorkerProcessError(AckQueueError, RuntimeError):
    """A worker process of a :class:`~ackqueue.ProcessPool` could not start working."""


class KeyTypeError(AckQueueError, TypeError):
    """A put by key (or remove, forget, seen) was given a key that is not a str or bytes."""


class UnknownKeyError(AckQueueError, KeyError):
    """``remove(key)`` named a key that no live item of the queue has."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # KeyError would show it quoted


class KeyHeldError(AckQueueError, ValueError):
    """``remove(key)`` named an item a consumer holds: its ack or nack decides its fate."""


class KeyTakenError(AckQueueError):
    """A put by key inside a transaction answered True, but another put of the same key
    committed first: the transaction was rolled back, so that no put that answered True is
    missing. Run the transaction again."""


class AsyncUsageError(AckQueueError, RuntimeError):
    """The asyncio API was used where it cannot keep its promises: on another event loop than
    the one an object is bound to, by a task that does not own a consumer, or a blocking call
    on a thread whose event loop uses the queue. The message says what to do instead."""
