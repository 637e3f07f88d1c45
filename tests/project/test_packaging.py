"""The source distribution carries the license, the tests, the examples and the benchmarks,
and tests run from an unpacked sdist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile

from conftest import REPO_ROOT

import ackqueue


def _build_sdist(tmp_path) -> str:
    # A copy, so that the build's egg-info never lands in the working tree.
    source = tmp_path / "source"
    scratch = shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis", "build", "dist", "*.fs*")
    data = os.path.join(REPO_ROOT, "tests", "data")

    def ignore(directory, names):  # queue files left in the tree, not the tests' own data
        return set() if os.path.samefile(directory, data) else scratch(directory, names)

    shutil.copytree(REPO_ROOT, source, ignore=ignore)
    out = tmp_path / "dist"
    out.mkdir()
    built = subprocess.run(
        [sys.executable, "-c",
         "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))", str(out)],
        cwd=source, capture_output=True, text=True, timeout=120,
    )
    assert built.returncode == 0, built.stderr
    assert "License classifiers are deprecated" not in built.stderr
    return str(out / built.stdout.strip().splitlines()[-1])


def test_the_sdist_holds_license_tests_examples_and_benchmarks(tmp_path):
    with tarfile.open(_build_sdist(tmp_path)) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("LICENSE", "README.rst", "tests/conftest.py", "tests/polling.py",
                   "tests/semantic_helpers.py", "tests/crash_child.py", "tests/queue/test_smoke.py",
                   "examples/drop_in.py", "examples/crawler.py", "benchmarks/_common.py",
                   "benchmarks/README.rst", "ackqueue/py.typed",
                   "tests/data/written_by_26e4f63.fs", "docs/architecture.rst",
                   "docs/index.rst", "docs/conf.py", "docs/_ext/ackqueue_cli.py",
                   "docs/howto/crawler.rst", "docs/reference/api.rst", "CHANGELOG.rst",
                   "CONTRIBUTING.rst", "benchmarks/pool_threads.png"):
        assert needed in names, f"{needed} is missing from the sdist"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_license_is_mit_for_the_ackqueue_authors():
    with open(os.path.join(REPO_ROOT, "LICENSE")) as f:
        text = f.read()
    assert text.startswith("MIT License") and "2026 the ackqueue authors" in text


def test_tests_run_from_the_unpacked_sdist(tmp_path):
    with tarfile.open(_build_sdist(tmp_path)) as tar:
        tar.extractall(tmp_path / "unpacked")
    (root,) = (tmp_path / "unpacked").iterdir()
    env = dict(os.environ, PYTHONPATH=str(root))
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/queue/test_smoke.py", "tests/project/test_examples.py::"
         "test_drop_in_squares_twenty_numbers_and_finds_nothing_left_over",
         "tests/storage/test_old_files.py"],  # reads a data file, not only code
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # The tests ran on the sdist's own copy of the package, not on this tree's.
    imported = subprocess.run([sys.executable, "-c", "import ackqueue; print(ackqueue.__file__)"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert imported.stdout.startswith(str(root)), imported.stdout
    assert ackqueue.__file__.startswith(REPO_ROOT)


def test_every_install_command_the_package_prints_names_a_real_extra_or_requirement():
    """Error messages and docstrings say ``pip install '.[extra]'`` (a checkout's extra:
    'ackqueue[extra]' fails, the project is not on the package index) or name the packages
    themselves (``pip install prometheus_client``), which works wherever ackqueue came from;
    each package named is one setup.cfg requires or offers."""
    import configparser
    import re

    config = configparser.ConfigParser()
    config.read(os.path.join(REPO_ROOT, "setup.cfg"))
    extras = set(config["options.extras_require"])
    listed = config["options"]["install_requires"] + "".join(
        config["options.extras_require"].values())
    packages = {re.split(r"[<>=\s]", line.strip())[0].lower()
                for line in listed.splitlines() if line.strip() and not line.startswith("#")}
    found = []
    for folder in ("ackqueue", "examples"):
        for root, _dirs, files in os.walk(os.path.join(REPO_ROOT, folder)):
            for name in (f for f in files if f.endswith(".py")):
                with open(os.path.join(root, name)) as f:
                    found += [(name, m) for m in re.findall(
                        r"pip install ('[^']*'|[A-Za-z][\w.-]*(?: [A-Za-z][\w.-]*)*)", f.read())]
    assert len(found) >= 4, found
    for name, target in found:
        if target.startswith("'"):
            match = re.fullmatch(r"'\.\[(\w+|\{extra\})\]'", target)
            assert match, f"{name}: pip install {target}: not a checkout's extra"
            assert match.group(1) in extras | {"{extra}"}, f"{name}: no extra {match.group(1)!r}"
        else:
            for package in target.split():
                assert package.lower() in packages, f"{name}: pip install {package}: not listed"


def test_every_install_command_in_the_readme_installs_from_the_checkout_with_real_extras():
    import configparser
    import re

    config = configparser.ConfigParser()
    config.read(os.path.join(REPO_ROOT, "setup.cfg"))
    extras = set(config["options.extras_require"])
    with open(os.path.join(REPO_ROOT, "README.rst")) as f:
        readme = f.read()
    commands = re.findall(r"pip install ((?:-e )?'?[^`\s']+'?)", readme)
    assert len(commands) >= 5, commands
    for target in commands:
        spec = target.removeprefix("-e ").strip("'")
        match = re.fullmatch(r"\.(?:\[(\w+)\])?", spec)
        assert match, f"pip install {target}: ackqueue is not on the package index"
        assert match.group(1) in extras | {None}, f"no extra {match.group(1)!r} in setup.cfg"
    assert "3.10, 3.11, 3.12 and 3.13" in readme
    assert config["options"]["python_requires"] == ">=3.10"
