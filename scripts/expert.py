"""`nacdrive expert eval`: how well an expert drives, over fixed seeds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agents.experts import EXPERTS
from scripts.cli import non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("expert", help="evaluate the CarRacing experts", description="Experts that drive CarRacing-v3.")
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True, parser_class=type(p))
    e = jobs.add_parser(
        "eval",
        help="closed-loop returns of an expert over fixed seeds",
        description=(
            "Drives full CarRacing-v3 episodes with an expert on seeds S, S+1, ... and prints the mean, "
            "std, min and 95 percent interval of the returns, the share of episodes >= 900 and of finished laps."
        ),
    )
    e.add_argument("--expert", default="track", choices=EXPERTS, help="which expert (default: track)")
    e.add_argument("--continuous", action="store_true", help="continuous actions (steer, gas, brake) instead of 5 discrete")
    e.add_argument("--episodes", type=positive_int, default=50, help="episodes (default 50)")
    e.add_argument("--seed-start", type=non_negative_int, default=0, help="first seed (default 0)")
    e.add_argument("--workers", type=non_negative_int, default=0, help="worker processes (default: up to 2)")
    e.add_argument("--json", type=Path, metavar="FILE", help="write the figures and per-episode returns as JSON")
    e.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from agents.expert_eval import ExpertEvalConfig, evaluate_expert

    cfg = ExpertEvalConfig(
        expert=args.expert, continuous=args.continuous, episodes=args.episodes, seed_start=args.seed_start, workers=args.workers
    )
    r = evaluate_expert(cfg)
    seeds = f"{r['seeds'][0]}..{r['seeds'][-1]}"
    print(
        f"{r['expert']} expert, {r['action_space']} actions, seeds {seeds}: "
        f"mean {r['mean_return']:.1f} +- {r['std_return']:.1f} (std), min {r['min_return']:.1f}, "
        f"95% CI [{r['ci95_low']:.1f}, {r['ci95_high']:.1f}], solved (>= 900) {r['solved_share']:.0%}, "
        f"laps finished {r['finished_share']:.0%}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(r, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
