"""More handlers for the ``ProcessPool`` tests (``tests/process_handlers.py`` holds the others,
and ``note``): ones that end their worker process, and one that reports the options of the
``WorkerPool`` it runs in. Items are dicts with ``n`` and the test's directory ``dir``."""

from __future__ import annotations

import gc
import json
import os
from typing import Any

from process_handlers import note


def exit_once(item: dict[str, Any]) -> None:
    """The item with ``die`` raises SystemExit the first time (in whichever process gets it):
    the only thread of that worker process ends, and so does its pool, by an error."""
    if item.get("die"):
        try:
            os.close(os.open(os.path.join(item["dir"], "died"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            raise SystemExit(3)
    note(item, "done")


def kill_on_poison(item: dict[str, Any]) -> None:
    """The item with ``poison`` kills its worker process every time; the others are done."""
    if item.get("poison"):
        os._exit(7)
    note(item, "done")


def report_options(item: dict[str, Any]) -> None:
    """Write the options of the WorkerPool running this handler to ``dir/options``."""
    from ackqueue.workers.pool import WorkerPool

    pool = next(o for o in gc.get_objects() if isinstance(o, WorkerPool))
    with open(os.path.join(item["dir"], "options"), "w") as f:
        json.dump({"poll": pool.poll, "prefetch": pool.prefetch,
                   "stop_timeout": pool.stop_timeout}, f)
    note(item, "done")
