"""docs/commands.md, the command reference: every command's --help, generated from the parsers (whose options are
generated from the configs, scripts.options). Regenerate it with `python -m scripts.reference > docs/commands.md`;
tests/scripts/test_options.py checks that it is current."""

from __future__ import annotations

import argparse
import os
import sys

WIDTH = "100"  # argparse wraps the help to the terminal's width: a fixed one keeps the file the same everywhere


def parsers(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """(command, its parser) for the parser and every subcommand under it, depth first."""
    out = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                out += parsers(p, f"{name} {sub}")
    return out


def reference() -> str:
    from scripts.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        lines = ["# Command reference", "",
                 "Every command's `--help`, generated from its parser (`python -m scripts.reference > docs/commands.md`). A command's",
                 "options are the fields of its config, each field's comment its help (scripts/options.py); the training recipe's",
                 "fields and presets are in agents/training/recipe.py.", ""]
        for name, p in parsers(build_parser(), "nacdrive")[1:]:
            lines += [f"## {name}", "", "```text", p.format_help().rstrip(), "```", ""]
        return "\n".join(lines)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


if __name__ == "__main__":
    sys.stdout.write(reference())
