"""The base layer: small tools every other layer may use, and that know nothing of queues.

Clocks (:mod:`.clock`), the timer thread (:mod:`.timers`), Ctrl-C shielding
(:mod:`.interrupts`) and hashable ids for keys (:mod:`.keyids`).

May import :mod:`ackqueue.errors` (and the standard library), nothing else of the package.
"""
