"""`nacdrive explain`: figures of what a policy does over one episode."""

from __future__ import annotations

import argparse

from agents.figures.explain import ExplainConfig
from scripts.args import add_scenario_flag
from scripts.options import add_fields, field_values

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
    names = add_fields(p, ExplainConfig, skip=("scenario",), positional=("run",))
    add_scenario_flag(p, "the episode")
    p.set_defaults(func=run, fields=names)


def run(args: argparse.Namespace) -> int:
    from agents.figures.explain import explain

    r = explain(ExplainConfig(**field_values(args, args.fields), scenario=args.scenario))
    print(f"return {r['return']:.1f} over {r['steps']} steps; agreement with the expert {r['agreement_with_expert']:.1%}")
    for f in r["figures"]:
        print(f"wrote {f}")
    print(f"wrote {args.out}/explain.md")
    return 0
