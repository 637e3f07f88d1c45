"""The package's folders are its layers, and each folder's ``__init__`` says what it owns and
what it may import: these tests hold the code to what those docstrings say, so that a module
added to a folder, or an import that goes up, shows up here instead of in a newcomer's reading.

- every module of a folder is named in the folder's docstring (``:mod:`.name```);
- every module a docstring names exists;
- every import of a module in the folder goes to its own folder or to one that the docstring's
  ``May import`` sentence names (``:mod:`ackqueue.layer```).
"""

from __future__ import annotations

import ast
import os
import re

import pytest
from conftest import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "ackqueue")
LAYERS = sorted(
    name for name in os.listdir(PACKAGE)
    if os.path.isfile(os.path.join(PACKAGE, name, "__init__.py"))
)


def modules_of(layer: str) -> list[str]:
    folder = os.path.join(PACKAGE, layer)
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")


def docstring_of(layer: str) -> str:
    with open(os.path.join(PACKAGE, layer, "__init__.py"), encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    assert doc, f"ackqueue/{layer}/__init__.py opens with no docstring"
    return doc


def may_import(layer: str) -> set[str]:
    """The top-level names of ``ackqueue`` that the ``May import`` sentence names."""
    doc = " ".join(docstring_of(layer).split())
    found = re.search(r"May import (.*?)(?:\.\s|\.$|;)", doc)
    assert found, f"ackqueue/{layer}/__init__.py does not say what it may import ('May import')"
    return set(re.findall(r":mod:`ackqueue\.(\w+)`", found.group(1)))


def imports_of(path: str) -> set[str]:
    """The top-level names of ``ackqueue`` that the module at ``path`` imports (at any depth)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found: set[str] = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "ackqueue" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_the_folder_docstring_names_each_of_its_modules_and_no_other(layer):
    named = set(re.findall(r":mod:`\.(\w+)`", docstring_of(layer)))
    assert sorted(set(modules_of(layer)) - named) == [], "modules the docstring does not name"
    assert sorted(named - set(modules_of(layer))) == [], "names of modules that do not exist"


@pytest.mark.parametrize("layer", LAYERS)
def test_the_folder_imports_only_what_its_docstring_allows(layer):
    allowed = may_import(layer) | {layer}
    assert not allowed - set(LAYERS) - {"errors", "records", layer}, "unknown names"
    wrong = {
        module: sorted(imports_of(os.path.join(PACKAGE, layer, module + ".py")) - allowed)
        for module in [*modules_of(layer), "__init__"]
    }
    assert {m: names for m, names in wrong.items() if names} == {}


def test_the_layers_import_only_downwards():
    """No folder may import one that may import it: the layers form no loop."""
    graph = {layer: may_import(layer) & set(LAYERS) for layer in LAYERS}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in graph[start]
        )

    assert [layer for layer in LAYERS if reaches(layer, layer, {layer})] == []
