"""``.. ackqueue-cli::``: the command line's reference, read from its argparse parser.

The parser is the one ``ackqueue`` runs, so a command or option added there appears here
without anyone editing the docs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def build_parser() -> argparse.ArgumentParser:
    import ackqueue.cli

    # build_parser lives beside main, wherever the CLI's modules are arranged.
    module = sys.modules[ackqueue.cli.main.__module__]
    parser: argparse.ArgumentParser = module.build_parser()
    return parser


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`")


def _options(program: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f".. program:: {program}", ""]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            metavar = ""
            if action.nargs != 0:
                metavar = " " + (action.metavar or action.dest.upper())
            names = ", ".join(f"{o}{metavar}" for o in action.option_strings)
        else:
            names = action.metavar or action.dest
        help_text = _escape(action.help or "")
        if action.required and action.option_strings:
            help_text += " (required)"
        lines += [f".. option:: {names}", "", f"   {help_text}", ""]
    return lines


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    usage = parser.format_usage().strip()
    return ["::", ""] + ["   " + line for line in usage.splitlines()] + [""]


class AckqueueCli(SphinxDirective):
    """Writes one section per command: its usage, what it does, and each option."""

    has_content = False

    def run(self) -> list[Any]:
        lines = reference(build_parser())
        container = nodes.section()
        nested_parse_with_titles(self.state, StringList(lines, source="ackqueue.cli"), container)
        return list(container.children)


def reference(parser: argparse.ArgumentParser) -> list[str]:
    """The reStructuredText of the reference: the program, then a section per command."""
    lines: list[str] = []
    lines += _usage(parser)
    lines += [_escape(parser.description or ""), ""]
    lines += _options("ackqueue", parser)
    for name, sub in subcommands(parser):
        title = f"ackqueue {name}"
        lines += [title, "-" * len(title), "", _escape(sub.description or ""), ""]
        lines += _usage(sub)
        lines += _options(title, sub)
    return lines


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("ackqueue-cli", AckqueueCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
