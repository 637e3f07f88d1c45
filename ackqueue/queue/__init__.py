"""The queue layer: the public queue classes and the consumer proxy.

:class:`~ackqueue.queue.queues.AckQueue` plugs into ``queue.Queue``'s hooks and delegates to
the collaborators below it; :class:`~ackqueue.queue.consumer.Consumer` is what ``connect()``
returns. May import every layer below (base, storage, delivery, shared); only the workers and
the command line import it.
"""
