"""`nacdrive sim`: a stand-in for the Udacity simulator (gymnasium CarRacing in its role)."""

from __future__ import annotations

import argparse

from scripts.args import add_scenario_flag
from scripts.options import add_fields, field_values
from sim_bridge.config import SimConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sim",
        help="stand-in Udacity simulator: CarRacing sends telemetry to a bridge, or records a training drive",
        description=(
            "Plays the Udacity simulator with gymnasium CarRacing (continuous actions). Without --record "
            "(autonomous mode) it connects to a bridge ('nacdrive drive') exactly as the simulator's client "
            "does, sends 320x160 JPEG telemetry with string fields and applies the steer/throttle replies. "
            "With --record DIR (training mode) the privileged track expert drives and the drive is written "
            "in the simulator's driving_log.csv format, ready for 'nacdrive train --task udacity'."
        ),
    )
    names = add_fields(p, SimConfig, skip=("scenario",))
    add_scenario_flag(p, "the car (the stand-in's camera shows it)")
    p.add_argument("--json", metavar="FILE", help="autonomous mode: write the statistics, per-seed returns and the bridge's figures as JSON")
    p.set_defaults(func=run, fields=names)


def run(args: argparse.Namespace) -> int:
    from sim_bridge.carracing_sim import drive_autonomous, record_training, to_markdown

    cfg = SimConfig(**field_values(args, args.fields), scenario=args.scenario)
    if cfg.record:
        r = record_training(cfg)
        print(f"recorded {r['rows']} frames into {r['folder']} (driving_log.csv + IMG/)")
        return 0
    r = drive_autonomous(cfg)
    print(to_markdown(r))
    print(f"unexpected replies {r['unexpected_replies']}")
    if args.json:
        from nac.checkpoint import write_json

        write_json(args.json, r)
        print(f"wrote {args.json}")
    return 0
