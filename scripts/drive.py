"""`nacdrive drive`: drive the Udacity simulator live with a trained PilotNet run."""

from __future__ import annotations

import argparse

from scripts.args import positive_float, positive_int


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
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; others only on purpose)")
    p.add_argument("--port", type=positive_int, default=4567, help="port (default 4567, where the simulator connects)")
    p.add_argument("--speed", type=positive_float, help="target speed in mph (default: the speed the run predicts for each frame "
                   "if it was trained with --speed-output, else 15, lowered in sharp turns)")
    p.add_argument("--max-steer", type=positive_float, default=1.0, help="clip steering to +-this (default 1)")
    p.add_argument("--turn-slowdown", type=float, default=0.5, metavar="S", help="with a fixed --speed: the target drops by this "
                   "share at full steering lock, in proportion below it (default 0.5; 0: the same speed in bends)")
    p.add_argument("--record", metavar="DIR", help="record frames and driving_log.csv (simulator format) into a new folder")
    p.add_argument("--weights", default="best", choices=("best", "last"), help="which weights (default best)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sim_bridge.server import BridgeConfig, serve_run

    serve_run(args.run, BridgeConfig(host=args.host, port=args.port, speed=args.speed, max_steer=args.max_steer, turn_slowdown=args.turn_slowdown, record=args.record), args.weights)
    return 0
