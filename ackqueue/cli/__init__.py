"""The tools layer: ``python -m ackqueue`` (inspect, requeue, purge, pack) and the demo.

The entry point and the reading commands (:mod:`.commands`), the changing ones
(:mod:`.changing`) and what they share (:mod:`.common`); reading a file from outside while a
process has it open (:mod:`.inspection`) into plain reports (:mod:`.reports`); ``groups``
(:mod:`.groups`), ``top`` (:mod:`.top`), ``salvage`` (:mod:`.salvage`), ``bench``
(:mod:`.bench`) and the tour (:mod:`.demo`).

May import :mod:`ackqueue.workers`, :mod:`ackqueue.queue`, :mod:`ackqueue.shared` (the stored
hold marks and sessions it reports), :mod:`ackqueue.storage`, :mod:`ackqueue.records` and
:mod:`ackqueue.errors`; nothing below imports it.
"""

from ackqueue.cli.commands import main

__all__ = ["main"]
