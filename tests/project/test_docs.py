"""The reference is complete: every public name has an entry, every option and public member
a docstring (autodoc makes the reference from them), and the command line's page lists every
command and option of the parser ``ackqueue`` runs."""

import argparse
import glob
import inspect
import os
import re
import sys

import pytest
from conftest import REPO_ROOT

import ackqueue

REFERENCE = os.path.join(REPO_ROOT, "docs", "reference")

# The classes a user constructs: each option of their constructor is documented in the class
# docstring (or, for a subclass with the same constructor, in its base's). Records a call
# returns (Delivery, QueueMetrics, ...) and consumers made by connect() are not constructed
# by users.
CONSTRUCTED = ["AckQueue", "LifoAckQueue", "PriorityAckQueue", "AsyncAckQueue",
               "AsyncLifoAckQueue", "AsyncPriorityAckQueue", "WorkerPool", "ProcessPool",
               "AsyncWorkerPool", "Retry", "ManualClock", "PrometheusCollector"]


def reference_text():
    text = ""
    for path in glob.glob(os.path.join(REFERENCE, "*.rst")):
        with open(path) as f:
            text += f.read()
    return text


def public_classes():
    return [(name, obj) for name in ackqueue.__all__
            if inspect.isclass(obj := getattr(ackqueue, name))]


def own_members(cls):
    """(name, function or property) of the public methods and properties ackqueue defines."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ackqueue"):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(raw, (staticmethod, classmethod)):
                raw = raw.__func__
            if isinstance(raw, property) or inspect.isfunction(raw):
                yield f"{klass.__name__}.{name}", raw


def test_every_public_name_has_a_reference_entry():
    text = reference_text()
    missing = [name for name in ackqueue.__all__
               if not re.search(rf"^\.\. auto(class|exception|function):: {name}$", text, re.M)]
    assert not missing


@pytest.mark.parametrize("name", CONSTRUCTED)
def test_every_constructor_option_is_documented(name):
    cls = getattr(ackqueue, name)
    docs = " ".join(inspect.getdoc(k) or "" for k in cls.__mro__
                    if k.__module__.startswith("ackqueue")
                    and inspect.signature(k) == inspect.signature(cls))
    options = [p.name for p in inspect.signature(cls).parameters.values()
               if p.kind is not p.VAR_KEYWORD]  # **options: the sync queue's, documented there
    assert options
    assert [o for o in options if f"``{o}" not in docs] == []


def test_every_public_member_has_a_docstring():
    undocumented = sorted({qualname for _, cls in public_classes()
                           for qualname, member in own_members(cls)
                           if not (member.__doc__ or "").strip()})
    assert not undocumented


def test_public_docstrings_point_at_no_private_module():
    """The reference is what a user reads: ``ackqueue.queue.keying`` is not theirs to open."""
    private = re.compile(r":mod:`|\bsee README\b|\b\w+\.py\b")
    offenders = []
    for name, cls in public_classes():
        docs = [(name, cls.__doc__)] + [(q, m.__doc__) for q, m in own_members(cls)]
        offenders += [q for q, doc in docs if doc and private.search(doc)]
    assert not offenders


def test_the_command_line_reference_lists_every_command_and_option():
    sys.path.insert(0, os.path.join(REPO_ROOT, "docs", "_ext"))
    try:
        import ackqueue_cli
    finally:
        sys.path.pop(0)
    from ackqueue.cli import main

    parser = sys.modules[main.__module__].build_parser()
    text = "\n".join(ackqueue_cli.reference(parser))
    commands = ackqueue_cli.subcommands(parser)
    assert len(commands) >= 10
    for name, sub in [("", parser), *commands]:
        program = f"ackqueue {name}".strip()
        assert f".. program:: {program}" in text
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            for flag in action.option_strings or [action.metavar or action.dest]:
                assert re.search(rf"^\.\. option:: .*{re.escape(flag)}\b", text, re.M), \
                    (program, flag)
