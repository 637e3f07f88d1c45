"""What ackqueue writes beside a queue file is readable by its owner only."""

from __future__ import annotations

import os
import stat

from polling import wait_until

import ackqueue


def test_the_status_file_beside_a_live_queue_is_readable_by_the_owner_only(qpath):
    old_umask = os.umask(0o022)  # the usual umask, which would make a plain file world-readable
    try:
        with ackqueue.AckQueue(qpath) as q:
            q.put({"secret": "token"})
            with q.connect() as c:
                c.get()
                status = qpath + ".status"
                wait_until(lambda: os.path.exists(status), timeout=10, what="the status file")
                mode = stat.S_IMODE(os.stat(status).st_mode)
                assert mode == 0o600, oct(mode)
    finally:
        os.umask(old_umask)
