"""Command-line options generated from the configs (scripts.options), and the command reference made from them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from scripts.cli import Parser, build_parser
from scripts.options import add_fields, field_help, field_values
from scripts.reference import reference

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Example:
    folders: list[str]  # where the data is
    rate: float = 0.5  # how fast,
    # over two lines
    count: int | None = None  # how many (default: as many as there are)
    mode: Literal["a", "b"] = "a"  # which mode
    kind: str = field(default="x", metadata={"choices": lambda: ("x", "y")})  # which kind
    quiet: bool = False  # say less
    colour: bool = True  # draw in colour
    smooth: bool = field(default=True, metadata={"negated": "rough", "negated_help": "do not smooth"})  # smooth the lines
    options: dict[str, Any] = field(default_factory=dict)  # more options
    bounds: tuple[float, float] = (0.0, 1.0)  # least and most


def parse(argv: list[str], **kw: Any) -> dict[str, Any]:
    p = Parser(prog="t")
    names = add_fields(p, Example, **kw)
    return field_values(p.parse_args(argv), names, drop_unset=True)


def test_a_field_comment_with_its_continuation_lines_is_its_help():
    docs = field_help(Example)
    assert docs["rate"] == "how fast, over two lines" and docs["folders"] == "where the data is"
    p = Parser(prog="t")
    add_fields(p, Example)
    text = p.format_help()
    assert "how fast, over two lines (default 0.5)" in " ".join(text.split())
    assert "how many (default: as many as there are)" in " ".join(text.split())  # a None default shows none of its own


def test_each_annotation_becomes_its_argparse_form():
    got = parse(["--folders", "p", "q", "--rate", "2", "--count", "3", "--mode", "b", "--kind", "y", "--quiet", "--no-colour", "--rough",
                 "--options", "k=3", "--options", "name=text", "--bounds", "1", "5"])
    assert got == {"folders": ["p", "q"], "rate": 2.0, "count": 3, "mode": "b", "kind": "y", "quiet": True, "colour": False,
                   "smooth": False, "options": {"k": 3, "name": "text"}, "bounds": [1.0, 5.0]}
    defaults = parse(["--folders", "p"])
    assert Example(**defaults) == Example(folders=["p"])  # what is not given is the config's default


def test_unset_fields_are_left_to_the_config_and_positional_ones_need_no_flag():
    assert parse(["p"], positional=("folders",), unset=("rate", "colour", "options")) == {
        "folders": ["p"], "mode": "a", "kind": "x", "quiet": False, "smooth": True, "bounds": (0.0, 1.0)}
    assert parse(["p", "--no-colour"], positional=("folders",), unset=("colour",))["colour"] is False


def test_a_bad_value_or_a_missing_comment_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse(["--folders", "p", "--mode", "c"])
    assert "invalid choice: 'c' (choose from 'a', 'b')" in capsys.readouterr().err

    @dataclass
    class Silent:
        n: int = 1

    with pytest.raises(TypeError, match="Silent.n has no comment"):
        add_fields(argparse.ArgumentParser(), Silent)


def test_train_flags_reach_the_training_and_its_network():
    from scripts.train import train_config

    args = build_parser().parse_args(["train", "--data", "d", "--out", "o", "--head", "gru", "--frame-stride", "2", "--no-use-time",
                                      "--nac", "topk=4", "--d-model", "32", "--augment", "randconv"])
    cfg = train_config(args)
    assert (cfg.head, cfg.frame_stride, cfg.augment, cfg.lr) == ("gru", 2, "randconv", 1e-4)
    assert cfg.net == {"use_time": False, "nac": {"topk": 4}, "d_model": 32}  # only the network options given


def test_quickstart_flags_override_its_preset():
    from agents.quickstart import QuickstartConfig
    from agents.training.recipe import preset_recipe

    args = build_parser().parse_args(["quickstart", "--discrete", "--lr", "3e-4", "--dagger-rounds", "3", "--seed", "2"])
    cfg = QuickstartConfig(**field_values(args, args.fields, drop_unset=True), recipe=field_values(args, args.recipe_fields, drop_unset=True))
    assert cfg.recipe == preset_recipe("quickstart-discrete", {"lr": 3e-4, "dagger_rounds": 3}).to_dict()
    assert (cfg.recipe["bc"]["epochs"], cfg.recipe["dagger"]["max_rounds"], cfg.seed) == (6, 4, 2)  # the preset's extra round kept


def test_a_nested_config_gives_its_fields_flags_and_a_renamed_one_says_its_new_name(capsys):
    """The recipe's parts give flat flags (--lr, --dagger-rounds), Rollouts' fields are every driving job's own (--ray
    alone: a new local instance), and a flag of an older name ends in one line naming today's."""
    args = build_parser().parse_args(["quickstart", "--dagger-off-road-steps", "40", "--noise", "0.1"])
    assert field_values(args, args.recipe_fields, drop_unset=True) == {"dagger": {"off_road_steps": 40}, "demos": {"noise": 0.1}}
    for command in (["evaluate", "r"], ["collect", "--out", "d"], ["dagger", "--run", "r"], ["expert", "eval"], ["study"]):
        args = build_parser().parse_args([*command, "--ray", "--max-steps", "50", "--workers", "1"])
        assert (args.ray, args.max_steps, args.workers) == ("local", 50, 1), command
    with pytest.raises(SystemExit):
        build_parser().parse_args(["quickstart", "--dagger-off-road", "40"])
    assert "--dagger-off-road is gone: it is --dagger-off-road-steps now" in capsys.readouterr().err


def test_the_command_reference_is_current():
    assert (ROOT / "docs" / "commands.md").read_text() == reference(), "run: python -m scripts.reference > docs/commands.md"
