"""A queue file that holds nothing yet (zero bytes, or a FileStorage header and no commit): every
command says so in one line and exits 1, and leaves the file as it was. Each once printed a
35-line ZODB traceback (ReadOnlyError)."""

from __future__ import annotations

import os

import pytest
from test_cli import run
from ZODB.FileStorage import FileStorage

COMMANDS = [
    ["stats"], ["stats", "--json"], ["peek"], ["dead"], ["groups"], ["top", "--once"],
    ["pause"], ["resume"], ["purge", "--ready", "--yes"], ["pack"],
    ["drop", "--name", "default", "--yes"], ["requeue", "--dead"], ["remove", "--key", "a"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_zero_byte_file_is_one_line_naming_it(tmp_path, capsys, command):
    path = tmp_path / "jobs.fs"
    path.touch()
    code, out, err = run(capsys, command[0], str(path), *command[1:])
    assert code == 1, out + err
    assert err.count("\n") == 1 and "jobs.fs is empty (0 bytes), not a queue file" in err, err
    assert os.listdir(tmp_path) == ["jobs.fs"] and path.stat().st_size == 0


@pytest.mark.parametrize("command", [["stats"], ["pause"], ["pack"]], ids=" ".join)
def test_a_filestorage_never_written_to_is_one_line_naming_it(tmp_path, capsys, command):
    path = tmp_path / "jobs.fs"
    FileStorage(str(path)).close()
    size = path.stat().st_size
    code, out, err = run(capsys, command[0], str(path), *command[1:])
    assert code == 1, out + err
    assert err.count("\n") == 1 and "never written to: no queue is stored in it" in err, err
    assert path.stat().st_size == size
