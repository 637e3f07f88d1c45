"""The tools layer: ``python -m ackqueue`` (inspect, requeue, purge, pack) and the demo.

It reads queue files through :mod:`ackqueue.storage` and opens queues through the public API;
nothing below imports it.
"""

from ackqueue.cli.commands import main

__all__ = ["main"]
