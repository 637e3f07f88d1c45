"""Faults with real processes and real SIGKILL on ``AckQueue(path, shared=True)``: workers (the
one that started the server among them) and the server itself killed at random moments of a
mixed workload lose nothing confirmed (see ``shared_campaign.py`` for what is checked).

``ACKQUEUE_SHARED_KILLS`` sets the number of kills (a few here, to stay under a minute;
``benchmarks/kill_shared.py`` runs 100 and more).
"""

from __future__ import annotations

import os

import pytest
import shared_campaign
from conftest import REPO_ROOT

KILLS = int(os.environ.get("ACKQUEUE_SHARED_KILLS", "6"))


@pytest.mark.campaign
def test_random_kills_of_workers_and_server_lose_nothing_confirmed(tmp_path, monkeypatch):
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "2")
    logs = tmp_path / "logs"
    logs.mkdir()
    result = shared_campaign.run(str(tmp_path / "q.fs"), str(logs), KILLS, REPO_ROOT, seed=11)
    assert result.problems == []
    assert result.kills == KILLS and result.starter_killed and result.server_kills >= 1
    assert result.confirmed_puts > 0 and result.confirmed_acks > 0

