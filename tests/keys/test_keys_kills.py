"""Kill -9 of a process putting by key (in transactions and out), acking and packing: no key is
admitted twice, nothing confirmed is lost (see ``tests/keys_campaign.py`` for what is checked).

``ACKQUEUE_KEY_KILLS`` sets the number of kills per mode (``benchmarks/kill_keys.py`` runs
100 and more)."""

from __future__ import annotations

import os

import keys_campaign
import pytest
from conftest import REPO_ROOT

KILLS = int(os.environ.get("ACKQUEUE_KEY_KILLS", "20"))


@pytest.mark.campaign
@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "shared"])
def test_kills_never_admit_a_key_twice_nor_lose_anything_confirmed(tmp_path, monkeypatch, shared):
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "2")
    result = keys_campaign.run(str(tmp_path / "q.fs"), str(tmp_path / "log"), KILLS, REPO_ROOT,
                               shared=shared, seed=12)
    assert result.problems == []
    assert result.kills == KILLS
    assert result.confirmed_admissions > 0 and result.confirmed_acks > 0 and result.refused > 0


@pytest.mark.campaign
@pytest.mark.parametrize(
    ("shared", "processes"), [(False, 1), (True, 2)], ids=["one-process", "shared"]
)
def test_keyed_puts_in_transactions_from_threads_and_processes_survive_kills(
    tmp_path, monkeypatch, shared, processes
):
    """Puts of one key race inside transactions, from three threads of each worker and (shared)
    two worker processes at once (issue 21 item 4): a put that answered True is stored, or its
    block failed with KeyTakenError; no key is admitted twice."""
    monkeypatch.setenv("ACKQUEUE_SERVER_IDLE", "2")
    result = keys_campaign.run(str(tmp_path / "q.fs"), str(tmp_path / "log"), KILLS // 2,
                               REPO_ROOT, shared=shared, seed=13, threads=3,
                               processes=processes)
    assert result.problems == []
    assert result.kills == KILLS // 2
    assert result.confirmed_admissions > 0 and result.confirmed_acks > 0 and result.refused > 0
