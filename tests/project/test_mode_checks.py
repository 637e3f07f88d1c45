"""The mode is the only place that knows one process from several.

A queue runs in one of two modes, chosen once when it opens (``ackqueue.queue.assembly``):
:class:`~ackqueue.delivery.local.LocalMode` or :class:`~ackqueue.shared.mode.SharedMode`. Code
elsewhere calls the mode it was given and never asks which one it is. These tests read the
package's source and find every *mode check* outside the places allowed to make one: the
assembly, the modes themselves (``delivery/mode.py``, ``delivery/local.py`` and the
``shared`` folder) and the command line (which reports on files from outside).

A mode check is any of:

1. naming a mode, or the choice of one: ``LocalMode``, ``SharedMode``, ``wants_shared``,
   ``is_shared_storage``, ``mode_class`` (an import, a call, an ``isinstance``);
2. the mode's ``shared`` flag tested in a condition: the test of an ``if``, ``while``,
   conditional expression, ``assert`` or comprehension, or an operand of ``and``, ``or``,
   ``not`` or a comparison anywhere in such a test;
3. testing whether a mode-only collaborator exists, in a condition as in 2: a name or
   attribute called ``rides``, ``grouping``, ``stored_holds``, ``indexing``, ``keeping`` or
   ``session`` (with or without a leading underscore), as in ``if self._rides is not None``;
4. the book's mode flags of old, anywhere: ``marks_done``, ``defer_count``.

Reporting the mode is not a check: ``AckQueue.shared`` returns the mode's ``shared`` flag. In
the storage layer ``shared`` is the opening option that picks an engine (a file served to
several processes by a private server), not the queue's mode: 2 does not apply there.
"""

from __future__ import annotations

import ast
import os

import pytest
from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "ackqueue")

# Paths relative to the package; a folder ends with "/".
ALLOWED = ("queue/assembly.py", "delivery/mode.py", "delivery/local.py", "shared/", "cli/")

ENGINE_OPTION = ("storage/",)  # where ``shared`` picks an engine (rule 2 does not apply)

MODE_NAMES = {"LocalMode", "SharedMode", "wants_shared", "is_shared_storage", "mode_class"}
OLD_FLAGS = {"marks_done", "defer_count"}
MODE_ONLY = {"rides", "grouping", "stored_holds", "indexing", "keeping", "session"}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _conditions(tree: ast.AST) -> list[ast.expr]:
    """Every expression whose value decides which way the code goes."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            found.append(node.test)
        elif isinstance(node, ast.comprehension):
            found.extend(node.ifs)
        elif isinstance(node, ast.BoolOp):
            found.extend(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            found.append(node.operand)
    return found


def mode_checks(source: str, engine_option: bool = False) -> list[tuple[int, str]]:
    """``(line, what)`` for each mode check in ``source`` (see the module docstring);
    ``engine_option``: ``shared`` is the storage layer's opening option there."""
    tree = ast.parse(source)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in MODE_NAMES | OLD_FLAGS:
                    found.add((node.lineno, f"imports {alias.name}"))
        name = _name(node)
        if name in MODE_NAMES | OLD_FLAGS:
            found.add((node.lineno, f"names {name}"))  # type: ignore[attr-defined]
        if isinstance(node, ast.keyword) and node.arg in OLD_FLAGS:
            found.add((node.value.lineno, f"passes {node.arg}="))
    for test in _conditions(tree):
        for node in ast.walk(test):
            name = _name(node)
            if name == "shared" and not engine_option:
                found.add((node.lineno, "tests the mode's shared flag"))  # type: ignore[attr-defined]
            elif name is not None and name.lstrip("_") in MODE_ONLY:
                found.add((node.lineno, f"tests whether {name} exists"))  # type: ignore[attr-defined]
    return sorted(found)


def _modules() -> list[str]:
    out = []
    for folder, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                out.append(os.path.relpath(os.path.join(folder, f), PACKAGE).replace(os.sep, "/"))
    return sorted(out)


def _within(module: str, places: tuple[str, ...]) -> bool:
    return any(module.startswith(a) if a.endswith("/") else module == a for a in places)


def test_no_module_outside_the_assembly_the_modes_and_the_cli_checks_the_mode():
    found = {}
    for module in _modules():
        if _within(module, ALLOWED):
            continue
        with open(os.path.join(PACKAGE, module), encoding="utf-8") as f:
            checks = mode_checks(f.read(), _within(module, ENGINE_OPTION))
        if checks:
            found[module] = checks
    assert found == {}, "ask the mode (delivery/mode.py) instead of asking which mode it is"


@pytest.mark.parametrize(
    "source",
    [
        "if self._mode.shared:\n    pass\n",
        "x = a if not queue.shared else b\n",
        "ok = core.mode.shared and max_attempts is None\n",
        "if self._rides is not None:\n    self._rides.drop_locked(t)\n",
        "return [] if self._grouping is None else None\n",
        "while session:\n    pass\n",
        "from ackqueue.shared.mode import SharedMode\n",
        "if isinstance(mode, LocalMode):\n    pass\n",
        "book = Book(store, name, kind, cls, defer_count=True)\n",
        "if not self.marks_done:\n    pass\n",
        "is_shared = wants_shared(store, None)\n",
    ],
)
def test_each_kind_of_mode_check_is_found(source):
    assert mode_checks(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "return self._mode.shared\n",  # reporting the mode (AckQueue.shared)
        "taken = self._mode.take(claims, self._supply)\n",
        "ride = self._rides.board(table, n)\nif ride is not None:\n    ride.edit()\n",
        "if self.groups is None:\n    pass\n",
    ],
)
def test_calling_the_mode_or_reporting_it_is_no_check(source):
    assert mode_checks(source) == []
