"""`nacdrive sim`: a stand-in for the Udacity simulator (gymnasium CarRacing in its role)."""

from __future__ import annotations

import argparse

from scripts.args import add_scenario_flag, non_negative_int, positive_int


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
    p.add_argument("--host", default="127.0.0.1", help="bridge address (default 127.0.0.1)")
    p.add_argument("--port", type=positive_int, default=4567, help="bridge port (default 4567)")
    p.add_argument("--seed", type=non_negative_int, default=20000, help="first track seed (default 20000)")
    p.add_argument("--episodes", type=positive_int, default=1, help="episodes (default 1)")
    p.add_argument("--max-steps", type=positive_int, default=1000, help="steps per episode (default 1000)")
    p.add_argument("--record", metavar="DIR", help="training mode: the expert drives; record into this new folder")
    p.add_argument("--noise", type=float, default=0.0, metavar="S",
                   help="training mode: the car executes the expert's steering plus a slowly varying offset of std S (the "
                   "recorded label stays the expert's), so the recording shows recoveries (DART; default 0; 0.3 was too much: the expert finished none of its laps)")
    p.add_argument("--policy-share", type=float, default=0.0, metavar="P",
                   help="training mode with a bridge ('nacdrive drive RUN' at --host / --port): each step, with probability P "
                   "the car executes the bridge's reply instead of the expert's action, the label staying the expert's (DAgger: "
                   "the recording shows how to drive on from where the policy takes the car; default 0)")
    add_scenario_flag(p, "the car (the stand-in's camera shows it)")
    p.add_argument("--json", metavar="FILE", help="autonomous mode: write the statistics, per-seed returns and the bridge's figures as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sim_bridge.carracing_sim import SimConfig, drive_autonomous, record_training, to_markdown

    cfg = SimConfig(host=args.host, port=args.port, seed=args.seed, episodes=args.episodes, max_steps=args.max_steps, record=args.record, noise=args.noise,
                    policy_share=args.policy_share, scenario=args.scenario)
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
