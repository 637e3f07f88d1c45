"""Every snippet in README.rst runs as shown, twice in a row, in order, in one fresh directory.

Each snippet's test is independent of the others' order: before it runs, every earlier
snippet that has not run yet in the directory runs first (as the reader would have), so a
test run alone, or in another order, sees what the README says came before it.

Python blocks run in this interpreter, each in a fresh namespace; console blocks run each
``$`` command as a child process (``ackqueue`` as ``python -m ackqueue``).
"""

import contextlib
import os
import re
import shlex
import subprocess
import sys
import threading

import pytest
from conftest import REPO_ROOT, child_env

README = os.path.join(REPO_ROOT, "README.rst")

def snippets():
    """(line number, language, code) for each code block of README.rst."""
    with open(README) as f:
        lines = f.read().splitlines()
    found = []
    for n, line in enumerate(lines):
        match = re.fullmatch(r"\.\. code-block:: (\w+)", line)
        if not match:
            continue
        body = []
        for follow in lines[n + 1:]:
            if follow and not follow.startswith(" "):
                break
            body.append(follow)
        indent = min(len(b) - len(b.lstrip()) for b in body if b.strip())
        # Blank lines in front keep tracebacks' line numbers those of README.rst.
        code = "\n" * (n + 1) + "\n".join(b[indent:] for b in body) + "\n"
        found.append((n + 1, match.group(1), code))
    return found


SNIPPETS = snippets()


class Workdir:
    """The directory the snippets share, and which of them have run in it."""

    def __init__(self, path):
        self.path = path
        self.ran = set()

    def run_up_to(self, line):
        """Run the snippets before ``line`` that have not run here yet, then that one."""
        for n, language, code in SNIPPETS:
            if n > line:
                break
            if n in self.ran:
                continue
            self.ran.add(n)  # a failing snippet fails its own test once, not every later one
            try:
                run_snippet(self.path, n, language, code)
            except BaseException as exc:
                if n == line:
                    raise
                raise AssertionError(f"README line {n}, run before line {line}, failed") from exc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("readme")
    os.symlink(os.path.join(REPO_ROOT, "examples"), path / "examples")
    return Workdir(path)


def test_readme_starts_with_the_two_commands():
    with open(README) as f:
        head = f.read().split("\n\n", 3)
    assert head[2].splitlines() == [
        "    python3 -m pip install -e '.[test]' && python3 -m ackqueue demo",
        "    python3 -m pip install -e '.[test]' && python3 -m pytest",
    ]


def test_readme_is_valid_restructuredtext():
    docutils_core = pytest.importorskip("docutils.core")
    with open(README) as f:
        text = f.read()
    warnings = []
    docutils_core.publish_doctree(
        text, settings_overrides={"report_level": 2, "halt_level": 5,
                                  "warning_stream": _Collect(warnings)},
    )
    assert not warnings, "".join(warnings)


class _Collect:
    def __init__(self, into):
        self.into = into

    def write(self, text):
        self.into.append(text)


@pytest.mark.parametrize(
    "line, language, code", SNIPPETS, ids=[f"line-{s[0]}" for s in SNIPPETS]
)
def test_readme_snippet_runs(workdir, monkeypatch, line, language, code):
    monkeypatch.chdir(workdir.path)
    workdir.run_up_to(line)


def run_snippet(workdir, line, language, code):
    for _ in range(2):  # a reader runs a snippet again: it must not trip on its first run's files
        if language == "python":
            run_python(code)
        elif language == "console":
            for command in (c[2:] for c in code.splitlines() if c.startswith("$ ")):
                run_command(command, workdir)
        else:
            pytest.fail(f"README line {line}: no runner for {language} blocks")


def run_python(code):
    hook = threading.excepthook
    try:
        with contextlib.redirect_stdout(open(os.devnull, "w")) as sink:
            try:
                exec(compile(code, README, "exec"), {"__name__": "__readme__"})
            finally:
                sink.close()
    finally:
        threading.excepthook = hook


def run_command(command, cwd):
    argv = shlex.split(command)
    if argv[0] == "ackqueue":
        argv = [sys.executable, "-m", "ackqueue", *argv[1:]]
    elif argv[0] == "python3":
        argv = [sys.executable, *argv[1:]]
    result = subprocess.run(argv, cwd=cwd, env=child_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"$ {command}\n{result.stdout}{result.stderr}"
