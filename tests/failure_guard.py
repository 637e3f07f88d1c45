"""A failing test fails alone; it never aborts the rest of the run.

Two things once turned one failing test into an INTERNALERROR that stopped the session and hid
every later test's result (a CI run ended so, after 521 s, with only ZEO's noise to read):

- At the end of a failing ``@given`` test, hypothesis's pytest plugin writes a patch that adds
  the failing example to the source, with libcst. Once RelStorage's SQLite adapter has been
  imported (the contract and shared tests import it at collection), ``abc.ABC`` carries a
  ``zope.interface`` ``__provides__`` that raises when read from an instance; libcst reads every
  attribute of its codemod and fails. The example is still printed in the failure itself; only
  the patch file is given up.
- Python 3.11's ``ast`` keeps one recursion counter per interpreter and does not restore it when
  a nested parse runs inside another (CPython gh-106905, fixed in 3.12). pytest parses the
  failing test's source to report it; when the garbage collector runs in the middle of that and
  a finalizer formats a traceback (which parses the source line too, for its ``^^^`` marks), the
  outer parse raises ``SystemError: AST constructor recursion depth mismatch``. ZEO's futures do
  exactly that when a client's server has gone. The report is therefore made with the collector
  paused; what it would have collected is collected right after.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

# Where hypothesis (6.x, core.py) leaves the failing examples for its plugin's patch writer.
FAILING_EXAMPLES = "_hypothesis_failing_examples"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    # Runs inside hypothesis's hook wrapper, before the wrapper reads the examples.
    if call.when == "teardown":
        item.__dict__.pop(FAILING_EXAMPLES, None)



class CollectorPaused:
    """Reports are made with the garbage collector paused (see above)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self) -> Iterator[None]:
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.enable()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(CollectorPaused(), "ackqueue-collector-paused")
