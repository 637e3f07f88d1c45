"""Every snippet in README.rst and in docs/ runs as shown, twice in a row, in order, in one
fresh directory per page.

Each snippet's test is independent of the others' order: before it runs, every earlier
snippet of its page that has not run yet in the page's directory runs first (as the reader
would have), so a test run alone, or in another order, sees what the page says came before
it.

Python blocks (``.. code-block:: python``) run in this interpreter, each in a fresh
namespace; console blocks run each ``$`` command as a child process (``ackqueue`` as
``python -m ackqueue``). A block that needs what a test machine lacks (a PostgreSQL server, a
package ackqueue does not depend on) is written ``.. code:: python`` and is not run; say
beside it what runs the same code instead.
"""

import contextlib
import glob
import os
import re
import shlex
import subprocess
import sys
import threading

import pytest
from conftest import REPO_ROOT, child_env

README = os.path.join(REPO_ROOT, "README.rst")
DOCS = os.path.join(REPO_ROOT, "docs")
PAGES = [README] + sorted(
    path for path in glob.glob(os.path.join(DOCS, "**", "*.rst"), recursive=True)
    if not os.path.relpath(path, DOCS).startswith("_build")
)
RUNNABLE = ("python", "console")


def snippets(page):
    """(line number, language, code) for each runnable code block of ``page``."""
    with open(page) as f:
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
        # Blank lines in front keep tracebacks' line numbers those of the page.
        code = "\n" * (n + 1) + "\n".join(b[indent:] for b in body) + "\n"
        found.append((n + 1, match.group(1), code))
    return found


SNIPPETS = {page: snippets(page) for page in PAGES}
CASES = [(page, *snippet) for page in PAGES for snippet in SNIPPETS[page]]


def _name(page):
    return os.path.relpath(page, REPO_ROOT)


class Workdir:
    """The directory one page's snippets share, and which of them have run in it."""

    def __init__(self, path, page):
        self.path = path
        self.page = page
        self.ran = set()

    def run_up_to(self, line):
        """Run the page's snippets before ``line`` that have not run here yet, then that one."""
        for n, language, code in SNIPPETS[self.page]:
            if n > line:
                break
            if n in self.ran:
                continue
            self.ran.add(n)  # a failing snippet fails its own test once, not every later one
            try:
                run_snippet(self.path, self.page, n, language, code)
            except BaseException as exc:
                if n == line:
                    raise
                raise AssertionError(
                    f"{_name(self.page)} line {n}, run before line {line}, failed"
                ) from exc


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    made = {}

    def workdir(page):
        if page not in made:
            path = tmp_path_factory.mktemp(re.sub(r"\W", "_", _name(page)))
            os.symlink(os.path.join(REPO_ROOT, "examples"), path / "examples")
            made[page] = Workdir(path, page)
        return made[page]

    return workdir


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


def test_readme_is_a_short_front_door():
    with open(README) as f:
        assert len(f.read().splitlines()) <= 300


def test_readme_first_screen_links_each_common_task():
    """The five tasks a new user comes for are each one click from the first screen."""
    with open(README) as f:
        first_screen = "\n".join(f.read().splitlines()[:40])
    for page in ("docs/tutorial/thread-pool.rst", "docs/howto/crawler.rst",
                 "docs/howto/processes.rst", "docs/howto/asyncio.rst",
                 "docs/howto/operations.rst"):
        assert f"<{page}>`_" in first_screen, page
        assert os.path.exists(os.path.join(REPO_ROOT, page)), page


def test_readme_links_lead_to_files():
    with open(README) as f:
        targets = re.findall(r"`[^`<]*<([^>`]+)>`_", f.read())
    assert targets
    for target in targets:
        if "://" not in target:
            assert os.path.exists(os.path.join(REPO_ROOT, target)), target


class _Collect:
    def __init__(self, into):
        self.into = into

    def write(self, text):
        self.into.append(text)


@pytest.mark.parametrize(
    "page, line, language, code", CASES, ids=[f"{_name(c[0])}-line-{c[1]}" for c in CASES]
)
def test_snippet_runs(workdirs, monkeypatch, page, line, language, code):
    workdir = workdirs(page)
    monkeypatch.chdir(workdir.path)
    workdir.run_up_to(line)


def run_snippet(workdir, page, line, language, code):
    for _ in range(2):  # a reader runs a snippet again: it must not trip on its first run's files
        if language == "python":
            run_python(code, page)
        elif language == "console":
            for command in (c[2:] for c in code.splitlines() if c.startswith("$ ")):
                run_command(command, workdir)
        else:
            pytest.fail(f"{_name(page)} line {line}: no runner for {language} blocks "
                        f"(runnable: {', '.join(RUNNABLE)})")


def run_python(code, page):
    hook = threading.excepthook
    try:
        with contextlib.redirect_stdout(open(os.devnull, "w")) as sink:
            try:
                exec(compile(code, page, "exec"), {"__name__": "__readme__"})
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
