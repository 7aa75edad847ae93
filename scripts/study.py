"""`nacdrive study`: heads x training seeds (x variants), trained and evaluated alike, reported run
by run: IQM and mean with intervals over runs and tracks, P(X > Y) over runs, performance profiles."""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.carracing.seeds import TEST_SEED
from agents.studies.grid import StudyConfig
from agents.studies.stats import FEW_RUNS
from agents.training.recipe import PRESETS, Recipe
from scripts.args import add_scenario_flag, positive_int
from scripts.options import add_fields, field_values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "study",
        help="several training runs per head, evaluated alike, compared run by run: IQM, intervals over runs, P(X > Y)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Runs a grid of training runs (variants x heads x training seeds) by one recipe: one demonstration set recorded\n"
            "and shared, behaviour cloning, DAgger (agents/pretrained/README.md's recipe by default); then drives every run on\n"
            "the same held-out seeds at every --perturb level, with the expert on the same seeds as reference. The seeds are\n"
            f"the validation tracks by default, where recipe decisions are taken; drive the test tracks (--seed-start {TEST_SEED})\n"
            "once, at the end, for a result to report.\n"
            "--task udacity: PilotNet runs on one stand-in recording ('sim --record'), each episode driven by the stand-in\n"
            "simulator through a bridge of its own, as 'drive' + 'sim' do (recipe keys: epochs, lr, batch_size, val_fraction,\n"
            "net.*; heads include dense, PilotNet's own layers; the report gives each head's validation MSE).\n"
            "Everything lands in OUT/study.json as it finishes; run the same command again to continue an interrupted\n"
            "study (finished runs and episodes are never redone; the grid may grow). The report (OUT/report/report.md,\n"
            "report.json, plots) counts training runs, not episodes: each run's mean, IQM, laps and worst track; per group the\n"
            "IQM and mean with 95 % intervals over runs and tracks; P(nac > other) as the chance that a run of one beats a run\n"
            "of the other, with its interval and the runs it would take to separate the difference; a warning for groups of\n"
            f"fewer than {FEW_RUNS} runs; with scenarios, each group's lowest run mean and every P(X > Y) per scene, in bold\n"
            "where the runs separate the two; performance profiles (rliable); and the CPU-hours its runs and episodes took.\n\n"
            "examples:\n"
            "  nacdrive study --heads nac lstm gru cfc mha --seeds 3 --episodes 50 --out runs/study\n"
            "  nacdrive study --heads nac --seeds 3 --variant base --variant bc:dagger_rounds=0 --out runs/bc-vs-dagger\n"
            "  nacdrive study --heads nac lstm --seeds 3 --perturb drop=0.2 --perturb jitter=3 --out runs/robust\n"
            "  nacdrive study --task udacity --heads dense nac lstm --seeds 3 --demos 10 --episodes 10 --speed 25 --out runs/pilotnet\n"
            "  nacdrive study --report runs/study          # rebuild the report from study.json alone"
        ),
    )
    names = add_fields(p, StudyConfig, skip=("variants", "levels"), unset=("out",))
    p.add_argument("--report", type=Path, metavar="DIR", help="only rebuild DIR/report from DIR/study.json, running nothing")
    p.add_argument(
        "--variant", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
        help="a recipe to train by, as overrides of the full recipe (repeatable; default one variant 'base'). Keys: the recipe's "
        f"fields ({', '.join(Recipe.names())}; agents/training/recipe.py, each explained in 'nacdrive quickstart --help'), "
        f"net.* for network options (e.g. net.use_time=false, net.nac.mode=euler), preset=NAME to start from a preset instead "
        f"({', '.join(PRESETS)}). Examples: bc:dagger_rounds=0, qs:preset=quickstart",
    )
    p.add_argument("--perturb", action="append", default=[], metavar="KIND=LEVEL",
                   help="also evaluate at this perturbation level (repeatable; see nacdrive evaluate --help), or in a scenario under it: "
                   "SCENARIO+KIND=LEVEL, e.g. color+jitter=3")
    add_scenario_flag(p, "every run as well (the expert drives each as a reference, and the report sets the published scores beside them)", repeat=True)
    p.add_argument("--reps", type=positive_int, default=2000, help="bootstrap resamples for the intervals (default 2000)")
    p.set_defaults(func=run, fields=names)


def run(args: argparse.Namespace) -> int:
    from scripts.args import UserError

    if args.report is not None:
        from agents.studies.report import build

        result = build(args.report, reps=args.reps)
        out = Path(args.report) / "report"
        print((out / "report.md").read_text())
        print(f"report: {out / 'report.md'} ({len(result['levels'])} levels)")
        return 0
    if args.out is None:
        raise UserError("give --out DIR for a study to run (or --report DIR to rebuild a report)")
    from agents.studies.grid import CLEAN
    from agents.studies.recipe import parse_variant
    from agents.studies.study import run_study
    from agents.studies.report import build

    variants = dict(parse_variant(v) for v in args.variant) if args.variant else {"base": {}}
    if args.variant and len(variants) != len(args.variant):
        raise UserError("two variants have the same name")
    cfg = StudyConfig(**field_values(args, args.fields), variants=variants, levels=[CLEAN, *args.scenario, *args.perturb])
    kind = None
    if cfg.task == "udacity":
        from sim_bridge.udacity_runs import UDACITY as kind
    run_study(cfg, kind=kind)
    build(args.out, reps=args.reps)
    print((Path(args.out) / "report" / "report.md").read_text())
    print(f"study: {Path(args.out) / 'study.json'}; report: {Path(args.out) / 'report' / 'report.md'}")
    return 0
