"""How a queue's entries are kept has one owner: ``ackqueue/records.py`` (issue 22).

Every other module reads and changes entries through ``QueueRecord``'s entry methods and
makes new ones only through the book (``storage/book.py``), so that a new stored layout (items
in segments, say) is a change of those two modules, not of every module that happens to walk
the tree. These tests find the code that reaches past them.
"""

from __future__ import annotations

import ast
import os

from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "ackqueue")
OWNER = os.path.join("ackqueue", "records.py")
MAKERS = {OWNER, os.path.join("ackqueue", "storage", "book.py")}


def modules() -> list[tuple[str, ast.Module]]:
    found = []
    for folder, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    found.append((os.path.relpath(path, REPO_ROOT), ast.parse(f.read())))
    return found


def reaches_tree(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "entries"


def makes_entry(node: ast.AST) -> bool:
    called = node.func if isinstance(node, ast.Call) else None
    return isinstance(called, ast.Name) and called.id == "Entry"


def found(check, skip: set[str]) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        f"{path}:{node.lineno}"
        for path, tree in modules()
        if path not in skip
        for node in ast.walk(tree)
        if check(node)
    ]


def test_only_the_record_reaches_its_entry_tree() -> None:
    reaching = found(reaches_tree, {OWNER})
    assert reaching == [], (
        "these read a queue record's entry tree themselves; use QueueRecord's entry methods "
        f"(entry, entry_at, entry_items, add_entry, drop_entry...): {reaching}"
    )


def test_only_the_book_makes_entries() -> None:
    making = found(makes_entry, MAKERS)
    assert making == [], f"these make stored entries outside the book: {making}"


def test_the_checks_see_code_that_reaches_past_the_record() -> None:
    """Each check finds what it looks for where it is allowed: records.py reaching its tree,
    the book making entries."""
    assert found(reaches_tree, set()) == found(reaches_tree, MAKERS - {OWNER}) != []
    assert found(makes_entry, set()) == found(makes_entry, {OWNER}) != []
