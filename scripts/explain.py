"""`nacdrive explain`: figures of what a policy does over one episode."""

from __future__ import annotations

import argparse

from agents.carracing.seeds import HELD_OUT_SEED
from scripts.args import add_scenario_flag, non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="PNG figures of a policy over one episode: NAC gates, saliency, actions",
        description=(
            "Drives one CarRacing-v3 episode with the run's policy on --seed and writes PNG figures to OUT: per NAC "
            "head phi, omega_tau and the attention logits over the episode coloured by the action taken, omega_tau "
            "per head and action, a grid of Grad-CAM saliency maps, and the policy's actions against the track "
            "expert's on the same frames; explain.md says what each figure shows."
        ),
    )
    p.add_argument("run", metavar="RUN", help="run folder")
    p.add_argument("--seed", type=non_negative_int, default=HELD_OUT_SEED, help=f"track seed (default {HELD_OUT_SEED}, the first held-out one)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the figures")
    p.add_argument("--max-steps", type=positive_int, default=1000, help="steps of the episode (default 1000)")
    add_scenario_flag(p, "the episode")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agents.figures.explain import ExplainConfig, explain

    r = explain(ExplainConfig(run=args.run, out=args.out, seed=args.seed, max_steps=args.max_steps, scenario=args.scenario))
    print(f"return {r['return']:.1f} over {r['steps']} steps; agreement with the expert {r['agreement_with_expert']:.1%}")
    for f in r["figures"]:
        print(f"wrote {f}")
    print(f"wrote {args.out}/explain.md")
    return 0
