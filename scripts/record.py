"""`nacdrive record`: an evaluation video with overlays."""

from __future__ import annotations

import argparse

from agents.experts import EXPERTS
from agents.carracing.seeds import HELD_OUT_SEED
from scripts.args import add_scenario_flag, non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="record an evaluation video (H.264 MP4) with overlays",
        description=(
            "Drives CarRacing-v3 with a run's policy (or an expert) on --seed and writes an H.264 MP4 at 50 fps: "
            "the camera upscaled 4x with a Grad-CAM saliency map (captum) blended on it, and a panel with step, "
            "speed, return so far, the chosen action and the action probabilities; for attention heads, the "
            "window's frames with the weight the last step gives each. --compare drives a second run on the "
            "same seed beside it. The last frame, with the final returns, is held for two seconds. --udacity DIR "
            "renders a recorded Udacity drive (frames + driving_log.csv) with its steering and throttle drawn on it."
        ),
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run folder (omit with --expert)")
    p.add_argument("--expert", choices=EXPERTS, help="record an expert (alone, or beside RUN)")
    p.add_argument("--udacity", metavar="DIR", help="render a recorded Udacity drive (driving_log.csv + IMG/) instead")
    p.add_argument("--continuous", action="store_true", help="the expert's action space when no run is given")
    p.add_argument("--compare", metavar="RUN", help="a second run, side by side on the same seed")
    p.add_argument("--seed", type=non_negative_int, default=HELD_OUT_SEED, help=f"track seed (default {HELD_OUT_SEED}, the first held-out one)")
    p.add_argument("--episodes", type=positive_int, default=1, help="consecutive seeds in one video (default 1)")
    p.add_argument("--no-saliency", action="store_true", help="leave out the saliency heatmap")
    p.add_argument("--max-steps", type=positive_int, default=1000, help="steps per episode (default 1000)")
    add_scenario_flag(p, "the episodes")
    p.add_argument("--out", required=True, metavar="FILE.mp4", help="the video file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agents.figures.video import RecordConfig, record_udacity, record_video

    if args.udacity:
        r = record_udacity(args.udacity, args.out)
        print(f"wrote {r['video']}: {r['frames']} frames at {r['fps']:.1f} fps" + (f" ({r['skipped_rows']} rows skipped)" if r["skipped_rows"] else ""))
        return 0
    runs = [r for r in (args.run, args.compare) if r]
    cfg = RecordConfig(
        out=args.out, runs=runs, expert=args.expert, continuous=args.continuous, seed=args.seed,
        episodes=args.episodes, max_steps=args.max_steps, saliency=not args.no_saliency, scenario=args.scenario,
    )
    result = record_video(cfg)
    for ep in result["episodes"]:
        print(f"seed {ep['seed']}: " + ", ".join(f"{k} {v:.1f}" for k, v in ep.items() if k != "seed"))
    print(f"wrote {result['video']}")
    return 0
