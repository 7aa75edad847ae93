"""`nacdrive evaluate`: closed-loop returns of trained runs, as one leaderboard."""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.carracing.seeds import TEST_SEED, VALIDATION_SEED, track_range
from agents.evaluation.evaluate import EvaluateConfig
from scripts.args import add_scenario_flag
from scripts.options import add_fields, field_values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="drive trained runs in CarRacing and rank them",
        description=(
            "Drives full CarRacing-v3 episodes (1000 steps) with each run's policy on seeds S, S+1, ... "
            "(none of which may be a seed its training data came from) and prints a leaderboard: mean, std "
            "and min return, 95 percent confidence interval, share of episodes >= 900 (solved), of finished "
            "laps and of track tiles visited, policy latency p50/p99 per step on one CPU thread, and the "
            "run's offline validation accuracy. The track expert drives the same seeds as a reference row. "
            "Ctrl-C keeps the finished episodes' results. The seeds are the validation tracks by default "
            f"({VALIDATION_SEED}..), where settings are chosen; a result to report is driven once, at the end, on the "
            f"test tracks (--seed-start {TEST_SEED}). The leaderboard names which it drove."
        ),
    )
    names = add_fields(p, EvaluateConfig, skip=("perturb", "scenario"), positional=("runs",))
    p.add_argument(
        "--perturb", action="append", default=[], metavar="NAME[=LEVEL]",
        help="evaluate under a perturbation, once per given level (repeat the flag): drop=p, jitter=s, hold=s, delay=k, "
        "noise=sigma, blur[=sigma], brightness=f, hue[=shift], action-noise=p; one leaderboard per level and a "
        "plot of return against level (give 'none' too for the clean level 0 of every panel)",
    )
    add_scenario_flag(p, "the runs (the expert drives each as a reference row; one leaderboard per scenario and perturbation)", repeat=True)
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="with --perturb: where the plot goes (default beside --json, else in the first run)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the leaderboard as JSON (a list, one object per row)")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write the leaderboard as a markdown table")
    p.set_defaults(func=run, fields=names)


def run(args: argparse.Namespace) -> int:
    from agents.evaluation.evaluate import evaluate

    from agents.evaluation.evaluate import robustness_plot

    specs = args.perturb or [None]
    configs = [
        EvaluateConfig(**field_values(args, args.fields), perturb=spec, scenario=scenario)
        for scenario in args.scenario or ["clean"] for spec in specs  # all checked before the first episode
    ]
    seeds = track_range(args.seed_start, args.episodes)  # says whether they are the validation or the test tracks
    rows: list = []
    for cfg in configs:
        title = seeds + ("" if cfg.scenario == "clean" else f", scenario {cfg.scenario}") + ("" if cfg.perturb is None else f", perturbation {cfg.perturb}")
        try:
            board = evaluate(cfg)
        except KeyboardInterrupt as exc:
            rows += getattr(exc, "partial", [])
            if rows:
                _report(rows, args, "partial leaderboard (interrupted)")
            raise KeyboardInterrupt(f"{sum(r['episodes'] for r in rows)} finished episodes kept") from None
        rows += board
        _print_board(board, title)
    _report(rows, args, None)
    if args.perturb:
        plot = args.plot or (args.json.with_suffix(".png") if args.json else Path(args.runs[0]) / "robustness.png")
        if robustness_plot(rows, plot):
            print(f"wrote {plot}")
    return 0


def _print_board(rows: list, title: str) -> None:
    from agents.evaluation.evaluate import to_markdown

    print(f"\nLeaderboard, {title}:\n\n{to_markdown(rows)}\n")


def _report(rows: list, args: argparse.Namespace, title: str | None) -> None:
    """Write the JSON / markdown files (and print the rows under `title` when given)."""
    from agents.evaluation.evaluate import to_markdown, write_leaderboard

    table = to_markdown(rows)
    if title:
        _print_board(rows, title)
    if args.json:
        write_leaderboard(rows, args.json)
        print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(f"Leaderboard, {rows[0]['tracks']}:\n\n{table}\n" if rows else table + "\n")
        print(f"wrote {args.markdown}")
