"""`nacdrive drive`: drive the Udacity simulator live with a trained PilotNet run."""

from __future__ import annotations

import argparse

from agents.driving.policy import WEIGHTS
from scripts.options import add_fields, field_values
from sim_bridge.config import BridgeConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "drive",
        help="drive the Udacity simulator live (socketio bridge)",
        description=(
            "Serves the Udacity self-driving-car simulator (autonomous mode) with a trained --task udacity run: "
            "every telemetry frame gets exactly one steer reply (steering from the model, throttle from a PI "
            "controller toward --speed, lowered in sharp turns, or toward the speed the model predicts). Bad telemetry or a model error gets a safe "
            "reply (last steering, no throttle) and is counted. A status line shows fps, latency p50/p99 and "
            "bad-frame counts. Works with the simulator's own client and standard Socket.IO clients; try it "
            "here with 'nacdrive sim'."
        ),
    )
    p.add_argument("run", metavar="RUN", help="a run folder from 'nacdrive train --task udacity'")
    names = add_fields(p, BridgeConfig, skip=("status_every",))
    p.add_argument("--weights", default="best", choices=WEIGHTS, help="which weights (default best)")
    p.set_defaults(func=run, fields=names)


def run(args: argparse.Namespace) -> int:
    from sim_bridge.server import serve_run

    serve_run(args.run, BridgeConfig(**field_values(args, args.fields)), args.weights)
    return 0
