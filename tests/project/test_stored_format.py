"""How a queue's entries are kept has one owner: ``ackqueue/records.py`` (issue 22).

Every other module reads, makes and changes entries through ``QueueRecord``'s entry methods
(``new_entry``, ``change_entry``...), so that a new stored layout (entries inline in their
buckets since format 3; items in segments, say) is a change of that module, not of every module
that happens to walk the tree or set an entry's attribute (an inline entry is a read-only copy:
an attribute set on it would be lost). These tests find the code that reaches past it.
"""

from __future__ import annotations

import ast
import os

from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "ackqueue")
OWNER = os.path.join("ackqueue", "records.py")


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
    return isinstance(called, ast.Name) and called.id in {"Entry", "InlineEntry"}


def sets_an_entry_field(node: ast.AST) -> bool:
    """An assignment to an attribute of a variable named as an entry (``entry.attempts += 1``,
    ``entry.holder = None``)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return False
    return any(
        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and "entry" in t.value.id
        for t in targets
    )


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


def test_only_the_record_makes_entries() -> None:
    making = found(makes_entry, {OWNER})
    assert making == [], (
        f"these make stored entries themselves; use QueueRecord.new_entry: {making}"
    )


def test_only_the_record_changes_entries() -> None:
    changing = found(sets_an_entry_field, {OWNER})
    assert changing == [], (
        "these set an entry's attribute themselves (lost on an inline entry, a copy); use "
        f"QueueRecord.change_entry: {changing}"
    )


def test_the_checks_see_code_that_reaches_past_the_record() -> None:
    """Each check finds what it looks for where it is allowed: records.py reaching its tree,
    making entries and setting their attributes."""
    for check in (reaches_tree, makes_entry, sets_an_entry_field):
        assert found(check, set()) != [], check.__name__
        assert found(check, {OWNER}) == [], check.__name__
