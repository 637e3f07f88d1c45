"""What a front end that does not wait in threads (:mod:`ackqueue.aio`) needs of a queue: its
:class:`~ackqueue.delivery.conditions.ReadyListeners`, told whenever items become ready."""

from __future__ import annotations

from typing import Any

from ackqueue.delivery.conditions import ReadyListeners
from ackqueue.queue.queues import AckQueue


def ready_listeners(queue: AckQueue[Any]) -> ReadyListeners:
    """The listeners of ``queue``: a one-shot callback added there runs when an item may be
    ready (with the queue's mutex held, in the thread that made it ready)."""
    return queue._signals.listeners
