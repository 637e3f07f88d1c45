"""``ackqueue remove FILE --key K``: drops waiting items by key; an unknown or held key is a
clear error and changes nothing."""

from __future__ import annotations

import os

import ackqueue
from ackqueue.cli.commands import main


def test_remove_by_key_from_the_command_line(tmp_path, capsys):
    path = os.path.join(tmp_path, "q.fs")
    with ackqueue.AckQueue(path) as q:
        q.put_many(["a", "b", "c"], keys=["https://a/", "k2", "raw"])
    assert main(["remove", path, "--key", "https://a/", "--key", "k2"]) == 0
    assert "removed the item with key 'k2'" in capsys.readouterr().out
    assert main(["remove", path, "--key", "k2"]) == 1
    assert "no live item with key 'k2': nothing was removed" in capsys.readouterr().err
    assert main(["remove", path, "--key", "raw", "--bytes"]) == 1  # b"raw" is another key
    capsys.readouterr()
    with ackqueue.AckQueue(path) as q:
        assert [q.get_nowait() for _ in range(q.qsize())] == ["c"]
