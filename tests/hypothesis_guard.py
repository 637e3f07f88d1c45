"""A failing hypothesis test fails alone; it never aborts the rest of the run.

At the end of a failing ``@given`` test, hypothesis's pytest plugin writes a patch that adds
the failing example to the source, with libcst. Once RelStorage's SQLite adapter has been
imported (the contract and shared tests import it at collection), ``abc.ABC`` carries a
``zope.interface`` ``__provides__`` that raises when read from an instance; libcst reads every
attribute of its codemod, and pytest stops the whole session with an INTERNALERROR at the
first failing ``@given`` test: a regression caught there hid every later test's result.
The example is still printed in the failure itself; only the patch file is given up.
"""

from __future__ import annotations

import pytest

# Where hypothesis (6.x, core.py) leaves the failing examples for its plugin's patch writer.
FAILING_EXAMPLES = "_hypothesis_failing_examples"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    # Runs inside hypothesis's hook wrapper, before the wrapper reads the examples.
    if call.when == "teardown":
        item.__dict__.pop(FAILING_EXAMPLES, None)
