"""What the subcommands share: argument types whose errors say what is allowed, and the
error type for a wrong command line. The subcommands import this, never `scripts.cli`, which
imports them."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from nac.config import NON_NEGATIVE, ConfigError, Range


class UserError(ConfigError):
    """Something the user gave is wrong; the message says what is allowed."""


def number(kind: type, rng: Range = NON_NEGATIVE) -> Any:
    """argparse type for a number: a whole number (kind int) or a finite number (float) that rng allows; anything
    else ends the command line with argparse's one line naming the flag and what is allowed. The options generated
    from config fields take their field's Range (scripts.options); hand-written ones give theirs here."""
    whole = kind is int

    def parse(text: str) -> Any:
        try:
            value: Any = int(text) if whole else float(text)
        except ValueError:
            value = None
        if value is None or not rng.allows(float(value), whole):
            raise argparse.ArgumentTypeError(f"expected {rng.describe(whole)}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some of its messages
    parse.range, parse.kind = rng, kind  # type: ignore[attr-defined]  # what the option allows, for its tests
    return parse


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: a whole number >= minimum."""
    return number(int, Range(minimum))


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def key_value(text: str) -> tuple[str, Any]:
    """--nac topk=8 -> ("topk", 8); values are read as JSON when they parse, else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


SCENARIO_HELP = ("color, color3 (road and grass colours shifted at each reset), bar (black bars at the frame's sides), blob (a red "
                 "square riding beside the car), noise (the grass replaced by noise drawn afresh every frame), photos (the grass "
                 "replaced by photographs, drawn per track), domain-randomize "
                 "(gymnasium's domain_randomize: random colours, its own tracks); default clean")


def scenario_name(text: str) -> str:
    """A scenario (agents.carracing.scenarios.SCENARIOS), or argparse's one-line error listing the allowed ones."""
    from agents.carracing.scenarios import check_scenario
    from nac.config import ConfigError

    try:
        check_scenario(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_scenario_flag(p: argparse.ArgumentParser, what: str, repeat: bool = False) -> None:
    """--scenario NAME: a generalization test of the field (agents.carracing.scenarios) to drive `what` in."""
    if repeat:
        p.add_argument("--scenario", action="append", default=[], metavar="NAME", type=scenario_name,
                       help=f"drive {what} in this generalization scenario (repeat the flag for several): {SCENARIO_HELP}")
    else:
        p.add_argument("--scenario", default="clean", metavar="NAME", type=scenario_name,
                       help=f"drive {what} in this generalization scenario: {SCENARIO_HELP}")
