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


def test_everything_a_shared_queue_writes_beside_its_file_is_the_owners_only(short_qpath):
    """shared=True: the served file and the server's directory, log, locks and socket."""
    qpath = short_qpath  # the server's directory beside the file: see the fixture
    old_umask = os.umask(0o022)
    try:
        with ackqueue.AckQueue(qpath, shared=True) as q:
            q.put({"secret": "token"}, key="k", group="g")
            directory = os.path.join(os.path.dirname(qpath), f".{os.path.basename(qpath)}.ackqueue")
            found = {}
            for root, dirs, files in os.walk(os.path.dirname(qpath)):
                for name in dirs + files:
                    path = os.path.join(root, name)
                    found[path] = stat.S_IMODE(os.lstat(path).st_mode)
        assert os.path.join(directory, "server.log") in found, sorted(found)
        wide = {p: oct(m) for p, m in found.items()
                if m & 0o077 and p != os.path.dirname(qpath)}
        assert wide == {}
    finally:
        os.umask(old_umask)
