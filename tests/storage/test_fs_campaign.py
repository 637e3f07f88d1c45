"""A few tries of each filesystem move of ``tests/fs_campaign.py`` (``benchmarks/fs_faults.py``
makes many): a tmpfs filled to ENOSPC and freed under a running queue, its directory removed or
its tmpfs lazily unmounted (some tries during an automatic pack), in one process and with
``shared=True``. Nothing confirmed is lost, no acked item comes back, every error is ackqueue's,
the queue recovers by itself from the full disk, and nothing hangs (a commit lock left held by
a failed pack, issue 21 item 7; a server that never exits, item 9). Needs root to mount.
"""

from __future__ import annotations

import fs_campaign
import pytest
from conftest import REPO_ROOT, seed_for

TRIES = 3


@pytest.mark.campaign
@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "shared"])
@pytest.mark.parametrize("move", ["full", "vanish"])
def test_a_full_or_vanishing_filesystem_loses_nothing_confirmed_and_never_hangs(
    tmp_path, monkeypatch, move, shared
):
    reason = fs_campaign.why_not(move, str(tmp_path))
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "1")
    result = fs_campaign.run(move, str(tmp_path), TRIES, REPO_ROOT, shared, seed_for(1))
    assert not result.failed, result.summary() + "\n" + "\n".join(
        f"{o}: {d}" for o, lines in result.examples.items() for d in lines)
    assert sum(result.counts.values()) == TRIES
    assert result.confirmed_puts and result.confirmed_acks
    if move == "full":
        assert result.errors_seen == TRIES, "the disk was full but no writer noticed"
