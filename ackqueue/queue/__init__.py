"""The queue layer: the public queue classes and the consumer proxy.

:class:`~ackqueue.queue.queues.AckQueue` (:mod:`.queues`) plugs into ``queue.Queue``'s hooks
and delegates to the collaborators that :mod:`.opening` builds around one state bundle
(:mod:`.core`): puts (:mod:`.putting`), claims (:mod:`.claiming`) with what a call carries to
the hooks (:mod:`.calls`), deliveries and settling (:mod:`.deliveries`), takes riding an ack's
commit (:mod:`.riding`), puts by key (:mod:`.keying`), groups (:mod:`.groupcontrol`), dead
letters (:mod:`.deadletters`), stopping (:mod:`.closing`), a queue collected unclosed
(:mod:`.dropping`), ready listeners for front ends that wait without threads
(:mod:`.listening`), metrics (:mod:`.metrics`), the status file (:mod:`.status`) and the
command line's requests to a live process (:mod:`.requests`).
:class:`~ackqueue.queue.consumer.Consumer` (:mod:`.consumer`) is what ``connect()`` returns.

May import :mod:`ackqueue.shared`, :mod:`ackqueue.delivery`, :mod:`ackqueue.storage`,
:mod:`ackqueue.base`, :mod:`ackqueue.records` and :mod:`ackqueue.errors`; only the workers,
the asyncio layer and the command line import it.
"""
