"""`nacdrive study`: heads x training seeds (x variants), trained and evaluated alike, reported
with IQM, stratified bootstrap intervals, performance profiles and probability of improvement."""

from __future__ import annotations

import argparse
from pathlib import Path

from nac.heads import head_names
from nac.pilotnet import DENSE
from agents.carracing.seeds import HELD_OUT_SEED
from scripts.args import add_ray_flag, add_scenario_flag, non_negative_int, positive_float, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "study",
        help="several training runs per head, evaluated alike, compared with IQM and bootstrap intervals (rliable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Runs a grid of training runs (variants x heads x training seeds) by one recipe: one demonstration set recorded\n"
            "and shared, behaviour cloning, DAgger (agents/pretrained/README.md's recipe by default); then drives every run on\n"
            "the same held-out seeds at every --perturb level, with the expert on the same seeds as reference.\n"
            "--task udacity: PilotNet runs on one stand-in recording ('sim --record'), each episode driven by the stand-in\n"
            "simulator through a bridge of its own, as 'drive' + 'sim' do (recipe keys: epochs, lr, batch_size, val_fraction,\n"
            "net.*; heads include dense, PilotNet's own layers; the report gives each head's validation MSE).\n"
            "Everything lands in OUT/study.json as it finishes; run the same command again to continue an interrupted\n"
            "study (finished runs and episodes are never redone; the grid may grow). The report (OUT/report/report.md,\n"
            "report.json, plots) gives per group the IQM and mean with 95 % stratified bootstrap intervals, each run's mean,\n"
            "performance profiles and P(nac > other), computed with rliable.\n\n"
            "examples:\n"
            "  nacdrive study --heads nac lstm gru cfc mha --seeds 3 --episodes 50 --out runs/study\n"
            "  nacdrive study --heads nac --seeds 3 --variant base --variant bc:dagger_rounds=0 --out runs/bc-vs-dagger\n"
            "  nacdrive study --heads nac lstm --seeds 3 --perturb drop=0.2 --perturb jitter=3 --out runs/robust\n"
            "  nacdrive study --task udacity --heads dense nac lstm --seeds 3 --demos 10 --episodes 10 --speed 25 --out runs/pilotnet\n"
            "  nacdrive study --report runs/study          # rebuild the report from study.json alone"
        ),
    )
    p.add_argument("--out", type=Path, help="the study folder (demos/, runs/, study.json, report/)")
    p.add_argument("--report", type=Path, metavar="DIR", help="only rebuild DIR/report from DIR/study.json, running nothing")
    p.add_argument("--task", default="carracing", choices=("carracing", "udacity"),
                   help="carracing (default): the CarRacing driving network; udacity: PilotNet through the bridge")
    p.add_argument("--heads", nargs="+", default=["nac", "lstm"], choices=[*head_names(), DENSE], metavar="HEAD",
                   help=f"sequence heads (default nac lstm; from {', '.join(head_names())}; udacity also {DENSE})")
    p.add_argument("--seeds", type=positive_int, default=3, help="training seeds per head and variant (default 3)")
    p.add_argument("--first-seed", type=non_negative_int, default=0, help="the first training seed (default 0)")
    p.add_argument(
        "--variant", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
        help="a recipe to train by, as overrides of the default recipe (repeatable; default one variant 'base'). Keys: epochs, "
        "dagger_rounds, dagger_until, dagger_check and dagger_max_rounds (dagger --until / --check / --max-rounds), dagger_episodes, dagger_epochs, dagger_average (dagger --average), dagger_beta, window, stride_jitter, regular_share (default: by head, as the quick start: a mix of frame gaps for heads given the frames' times), shift, select_episodes, lr, batch_size, loss (mse or l1), balance (auto, weights, sampler, none), turn_weight (train --turn-weight), val_fraction, noise (DART: the steering drift of the demonstrations, collect --noise; each value records its own set), net.* (network options, "
        "e.g. net.use_time=false, net.nac.mode=euler). Example: bc:dagger_rounds=0",
    )
    p.add_argument("--demos", type=positive_int, default=50, help="expert demonstrations, seeds 0.. (default 50)")
    p.add_argument("--discrete", action="store_true", help="5 discrete actions instead of continuous (steer, gas, brake)")
    p.add_argument("--episodes", type=positive_int, default=50, help="held-out episodes per run and level (default 50)")
    p.add_argument("--perturb-episodes", type=positive_int, metavar="N",
                   help="held-out episodes per run at each --perturb level: the first N of the clean level's seeds (default: --episodes)")
    p.add_argument("--seed-start", type=non_negative_int, default=HELD_OUT_SEED, help=f"first held-out seed (default {HELD_OUT_SEED})")
    p.add_argument("--perturb", action="append", default=[], metavar="KIND=LEVEL",
                   help="also evaluate at this perturbation level (repeatable; see nacdrive evaluate --help), or in a scenario under it: "
                   "SCENARIO+KIND=LEVEL, e.g. color+jitter=3")
    add_scenario_flag(p, "every run as well (the expert drives each as a reference, and the report sets the published scores beside them)", repeat=True)
    p.add_argument("--speed", type=positive_float, help="udacity: the bridge's target speed in mph (drive --speed; default: "
                   "the speed a run predicts, net.speed_output=true, else 15)")
    p.add_argument("--turn-slowdown", type=float, default=0.5, metavar="S", help="udacity, with --speed: the target drops by this share "
                   "at full steering lock (drive --turn-slowdown; default 0.5)")
    p.add_argument("--workers", type=non_negative_int, default=0, help="local processes, each one training run or episode at a time (default: up to 2)")
    add_ray_flag(p, "the training runs and episodes")
    p.add_argument("--reps", type=positive_int, default=2000, help="bootstrap resamples for the intervals (default 2000)")
    p.add_argument("--max-steps", type=positive_int, default=1000, help=argparse.SUPPRESS)  # tests: short episodes
    p.set_defaults(func=run)


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
    from agents.studies.config import CLEAN, StudyConfig
    from agents.studies.recipe import parse_variant
    from agents.studies.study import run_study
    from agents.studies.report import build

    variants = dict(parse_variant(v) for v in args.variant) if args.variant else {"base": {}}
    if args.variant and len(variants) != len(args.variant):
        raise UserError("two variants have the same name")
    cfg = StudyConfig(
        out=str(args.out), heads=args.heads, seeds=args.seeds, first_seed=args.first_seed, variants=variants, demos=args.demos,
        continuous=not args.discrete, episodes=args.episodes, perturb_episodes=args.perturb_episodes, seed_start=args.seed_start, levels=[CLEAN, *args.scenario, *args.perturb],
        max_steps=args.max_steps, workers=args.workers, ray=args.ray, task=args.task, speed=args.speed, turn_slowdown=args.turn_slowdown,
    )
    kind = None
    if cfg.task == "udacity":
        from sim_bridge.study import UDACITY as kind
    run_study(cfg, kind=kind)
    build(args.out, reps=args.reps)
    print((Path(args.out) / "report" / "report.md").read_text())
    print(f"study: {Path(args.out) / 'study.json'}; report: {Path(args.out) / 'report' / 'report.md'}")
    return 0
