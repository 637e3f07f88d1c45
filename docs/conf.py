"""Sphinx configuration: ``python3 -m sphinx -W --keep-going docs docs/_build/html``."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.dirname(HERE))  # the checkout's ackqueue, installed or not

project = "ackqueue"
author = "the ackqueue authors"
copyright = "2026, the ackqueue authors"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "ackqueue_cli",
]
exclude_patterns = ["_build"]
html_theme = "alabaster"  # ships with Sphinx: nothing else to install
html_theme_options = {"description": "A durable queue.Queue with acknowledgements, on ZODB"}

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
# The annotations name classes of private modules (Clock, Handler, Runner, ...) that have no
# page of their own: reported as unresolved, they would fail the -W build.
nitpicky = False

doctest_global_setup = "import ackqueue"
