"""What a plain install brings, and what each optional part says when its package is missing.

ZEO (ZODB's own server) and zodburi are requirements: ``shared=True`` and ``zeo://`` work after
``pip install .``; the ``[zeo]`` extra stays, so that install lines naming it still work. A
missing package is named with the command that installs it wherever ackqueue came from (a wheel
user has no checkout), and a Prometheus collector made without prometheus_client fails when it
is made, not at Prometheus's first scrape."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys

from conftest import REPO_ROOT, child_env

# Runs ``code`` in a fresh interpreter where importing each of ``absent`` fails, as where the
# package is not installed.
WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
"""


def _run_without(absent: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT + code, absent, *args],
                          env=child_env(), capture_output=True, text=True, timeout=120)


def _requirements(section: str, key: str) -> set[str]:
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO_ROOT, "setup.cfg"))
    lines = config[section][key].splitlines()
    return {line.split(">")[0].split("=")[0].strip() for line in lines if line.strip()}


def test_zeo_and_zodburi_come_with_a_plain_install_and_the_zeo_extra_still_works():
    assert {"ZEO", "zodburi"} <= _requirements("options", "install_requires")
    assert {"ZEO", "zodburi"} <= _requirements("options.extras_require", "zeo")


def test_shared_mode_without_zeo_names_the_package_not_a_checkout(tmp_path):
    done = _run_without("ZEO,ZEO.ClientStorage", """
import ackqueue
try:
    ackqueue.AckQueue(sys.argv[2], shared=True)
except ackqueue.StorageError as exc:
    print(exc)
""", str(tmp_path / "q.fs"))
    assert "shared=True needs ZEO" in done.stdout and "pip install ZEO" in done.stdout, done
    assert "checkout" not in done.stdout


def test_a_uri_without_zodburi_names_the_package_not_a_checkout():
    done = _run_without("zodburi", """
import ackqueue
try:
    ackqueue.AckQueue("zeo://127.0.0.1:1")
except ackqueue.StorageError as exc:
    print(exc)
""")
    assert "needs the zodburi package" in done.stdout and "pip install zodburi" in done.stdout, done
    assert "checkout" not in done.stdout


def test_a_prometheus_collector_without_prometheus_client_fails_when_made():
    done = _run_without("prometheus_client", """
import ackqueue
q = ackqueue.AckQueue()
try:
    ackqueue.PrometheusCollector(q)
except ImportError as exc:
    print("refused:", exc)
else:
    print("made")
""")
    assert done.stdout.startswith("refused: PrometheusCollector needs the prometheus_client "
                                  "package: pip install prometheus_client"), done
    assert "[metrics] extra" in done.stdout


def test_the_scrapy_add_on_without_scrapy_names_the_package_and_ackqueue_does_not_need_it():
    done = _run_without("scrapy", """
import ackqueue
assert "scrapy" not in sys.modules or sys.modules["scrapy"] is None
try:
    import ackqueue.contrib.scrapy
except ImportError as exc:
    print(exc)
""")
    assert done.returncode == 0, done.stderr
    assert "ackqueue.contrib.scrapy needs Scrapy: pip install Scrapy" in done.stdout


def test_a_program_that_uses_no_asyncio_does_not_import_it_and_the_async_api_is_there():
    """Importing asyncio costs about a fifth of a second of CPU at the start of every program,
    worker process and command-line call: ``import ackqueue`` and a file queue's put, get,
    ack and close leave it out; naming the async API imports it, and ``dir`` lists it."""
    done = subprocess.run([sys.executable, "-c", """
import os, sys, tempfile
import ackqueue
with ackqueue.AckQueue(os.path.join(tempfile.mkdtemp(), "q.fs")) as q, q.connect() as c:
    q.put(1)
    c.ack(c.get())
print("asyncio" in sys.modules, "AsyncWorkerPool" in dir(ackqueue))
print(ackqueue.AsyncAckQueue.__name__, ackqueue.AsyncWorkerPool.__name__, "asyncio" in sys.modules)
try:
    ackqueue.AsyncNothing
except AttributeError as exc:
    print(exc)
"""], env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "False True",
        "AsyncAckQueue AsyncWorkerPool True",
        "module 'ackqueue' has no attribute 'AsyncNothing'",
    ]
