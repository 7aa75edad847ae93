"""`nacdrive`: one command, a subcommand per user job.

Each subcommand lives in its own module of this package with `register(subparsers)`, which
adds its parser and sets `func`; the commands are thin: parse, build the config, call one
library function.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from datasets.demos import DataError
from nac.config import ConfigError, TrainingDiverged

# Subcommand modules, in the order `nacdrive --help` lists them.
COMMANDS = ("quickstart", "collect", "train", "dagger", "evaluate", "study", "record", "explain", "drive", "sim", "expert", "bench")


class Parser(argparse.ArgumentParser):
    """argparse that ends a bad command line with one line saying what is allowed."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def build_parser() -> Parser:
    parser = Parser(
        prog="nacdrive",
        description="Closed-loop driving agents around the Neuronal Attention Circuit (NAC).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, required=True)
    for name in COMMANDS:
        importlib.import_module(f"scripts.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # report unknown flags against the subcommand, whose --help lists the allowed ones
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args) or 0)
    except (ConfigError, DataError, FileNotFoundError, FileExistsError, NotADirectoryError) as exc:
        print(f"nacdrive {args.command}: {exc}", file=sys.stderr)
        return 2
    except TrainingDiverged as exc:
        print(f"nacdrive {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        print(f"\nnacdrive {args.command}: interrupted{': ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
