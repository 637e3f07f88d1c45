"""README's install (``pip install -e '.[test]'``) leaves a package that a type checker sees.

setuptools' default editable install is an import hook that mypy cannot follow: a user's code
checked against it found no ``ackqueue`` at all. setup.cfg asks for the ``compat`` mode, a
plain path in a ``.pth`` file, which every checker reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import REPO_ROOT

USER_CODE = """\
from ackqueue import AckQueue

count: str = AckQueue(None).qsize()
"""


def _installed_editable_from_this_checkout() -> bool:
    # A checkout's own ``ackqueue.egg-info`` may come first on sys.path: look at every copy.
    for found in metadata.distributions(name="ackqueue"):
        direct_url = json.loads(found.read_text("direct_url.json") or "{}")
        url = direct_url.get("url", "")
        if direct_url.get("dir_info", {}).get("editable") and url.startswith("file://") \
                and os.path.samefile(url.removeprefix("file://"), REPO_ROOT):
            return True
    return False


def test_mypy_sees_the_package_that_readme_installs(tmp_path):
    pytest.importorskip("mypy")
    if not _installed_editable_from_this_checkout():
        pytest.skip("ackqueue is not installed here the way README says (pip install -e .)")
    (tmp_path / "user.py").write_text(USER_CODE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "--python-executable", sys.executable, "user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    report = done.stdout + done.stderr
    # The one error is the user's own, found because mypy read the package's types.
    assert "import-not-found" not in report, report
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' \
        in report, report
