"""Every numeric option of every command, given a bad value (negative, zero, huge, not finite, text), ends the
command line with one line that names the option and says what is allowed: never a traceback, never a run.
The options are found by walking the parser, so an option added tomorrow is swept too."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing

import pytest

from nac.config import ConfigError, above, at_least, between, check_ranges, field_range, number_kind
from scripts.cli import build_parser, main

BAD = ("-5", "0", "99999999999999999999", "1e999", "nan", "abc")


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sub in subs[0].choices.items():
        yield from _leaves(sub, (*path, name))


def _numeric_options():
    for path, parser in _leaves(build_parser()):
        for action in parser._actions:
            if action.option_strings and (action.type in (int, float) or hasattr(action.type, "range")):
                yield path, action


OPTIONS = sorted(((path, a.option_strings[-1], a) for path, a in _numeric_options()), key=lambda t: (t[0], t[1]))


def test_every_numeric_option_declares_what_it_allows():
    assert len(OPTIONS) > 150  # the walk found the commands' options
    plain = [f"{' '.join(p)} {flag}" for p, flag, a in OPTIONS if a.type in (int, float)]
    assert not plain, f"options parsed as a bare int or float (no range, no one-line error): {plain}"


def _nargs(action: argparse.Action) -> int:
    return action.nargs if isinstance(action.nargs, int) else 1


@pytest.mark.parametrize("path,flag,action", OPTIONS, ids=[f"{' '.join(p)}{f}" for p, f, _ in OPTIONS])
def test_a_bad_value_is_one_line_naming_the_option(path, flag, action, capsys):
    allowed = []
    for bad in BAD:
        kind, rng = action.type.kind, action.type.range
        try:
            in_range = rng.allows(float(bad), kind is int) and (kind is float or float(bad).is_integer())
        except ValueError:
            in_range = False
        if in_range:  # zero, for an option that allows it: test_the_declared_range_is_the_configs
            allowed.append(bad)
            continue
        with pytest.raises(SystemExit) as exc:
            main([*path, flag, *[bad] * _nargs(action)])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert exc.value.code == 2 and len(lines) == 1, err
        assert f"argument {flag}" in lines[0] and f"got {bad!r}" in lines[0] and "expected" in lines[0], lines[0]
    signed = action.type.range.lo is None  # declared so (SIGNED): a log standard deviation
    assert set(allowed) <= ({"-5", "0"} if signed else {"0"}), f"{flag} allows {allowed}: a huge or non-finite value, or a negative one, must be refused"


# Checks of one field against others (a seed range that would overlap the held-out seeds, two speeds in order): the
# value alone is in its field's range, so the flag takes it and the config's check refuses it, still in one line.
ACROSS_FIELDS = {
    ("QuickstartConfig", "eval_seed_start"),  # the held-out seeds must not overlap the demonstrations' (set by --seed)
    ("StudyConfig", "seed_start"),  # likewise, against --demos
    ("DrivingNetConfig", "target_speeds"),  # the least below the most
    ("DaggerConfig", "rounds"),  # the dagger command runs at least one round; a recipe may run none
    ("DrivingNetConfig", "d_model"),  # a multiple of num_heads
    ("PilotNetConfig", "d_model"),
}
PLACEHOLDERS = {"out": "video.mp4", "run": "runs/r", "data": ["demos"]}


def _config_classes(monkeypatch) -> list[type]:
    """The config dataclasses the commands generate their options from (each nested part too)."""
    import importlib

    import scripts.cli
    import scripts.options

    found: dict[type, None] = {}
    real = scripts.options.add_fields

    def spy(p, cls, *args, **kwargs):
        hints = typing.get_type_hints(cls)
        found.update({cls: None, **{hints[f.name]: None for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}})
        return real(p, cls, *args, **kwargs)

    for name in scripts.cli.COMMANDS:
        module = importlib.import_module(f"scripts.{name}")
        if hasattr(module, "add_fields"):
            monkeypatch.setattr(module, "add_fields", spy)
    build_parser()
    return list(found)


def _build(cls: type, **values):
    required = {f.name: PLACEHOLDERS.get(f.name, "x") for f in dataclasses.fields(cls)
                if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    if cls.__name__ == "EvaluateConfig":
        required["runs"] = ["runs/r"]
    return cls(**{**required, **values})


def test_the_declared_range_is_the_configs(monkeypatch):
    """A value the flag takes (its field's range) the config takes too, and a value below the range the config refuses
    with a message naming the field: the range is declared once and both read it."""
    classes = _config_classes(monkeypatch)
    assert len(classes) >= 15
    checked = 0
    for cls in classes:
        _build(cls)  # the defaults are within their ranges
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind = number_kind(hints[f.name])
            if kind is None or not f.init:
                continue
            rng, whole = field_range(f), kind is int
            many = typing.get_origin(hints[f.name]) in (list, tuple)
            default = f.default if f.default is not dataclasses.MISSING else None
            wrap = (lambda v: type(default)([v] * len(default))) if many else (lambda v: v)
            lowest = rng.lo + (1 if whole else 1e-3) * rng.lo_open if rng.lo is not None else -1
            if (cls.__name__, f.name) not in ACROSS_FIELDS:
                _build(cls, **{f.name: wrap(kind(lowest))})
            for bad in ([rng.lo - 1] if rng.lo is not None else []) + ([] if whole else [float("nan"), float("inf")]):
                with pytest.raises(ConfigError, match=f.name.replace("_", "-")):
                    _build(cls, **{f.name: wrap(kind(bad) if whole else bad)})
            checked += 1
    assert checked > 120


def test_check_ranges_reads_a_hand_written_case():
    @dataclasses.dataclass
    class Probe:
        count: int = dataclasses.field(default=1, metadata=at_least(1))
        share: float = dataclasses.field(default=0.5, metadata=between(0, 1, hi_open=True))
        rate: float = dataclasses.field(default=1.0, metadata=above(0))

        def __post_init__(self) -> None:
            check_ranges(self)

    Probe(count=2**31 - 1, share=0.0, rate=1e-9)
    for kw, said in (({"count": 0}, "count must be a whole number in 1..2147483647 (got 0)"),
                     ({"count": 2**31}, "count must be a whole number in 1..2147483647"),
                     ({"share": 1.0}, "share must be a number in [0, 1) (got 1.0)"),
                     ({"rate": 0.0}, "rate must be a number in (0, 1e+09] (got 0.0)"),
                     ({"count": 1.5}, "count must be a whole number")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            Probe(**kw)
