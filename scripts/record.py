"""`nacdrive record`: an evaluation video with overlays."""

from __future__ import annotations

import argparse

from agents.figures.video import RecordConfig
from scripts.args import add_scenario_flag
from scripts.options import add_fields, field_values

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="record an evaluation video (H.264 MP4) with overlays",
        description=(
            "Drives CarRacing-v3 with a run's policy (or an expert) on --seed and writes an H.264 MP4 at 50 fps: "
            "the camera upscaled 4x with a Grad-CAM saliency map (captum) blended on it, and a panel with step, "
            "speed, return so far, the chosen action and the action probabilities; for attention heads, the "
            "window's frames with the weight the last step gives each. Two runs (or a run and --expert) drive "
            "the same seed side by side. The last frame, with the final returns, is held for two seconds. --udacity DIR "
            "renders a recorded Udacity drive (frames + driving_log.csv) with its steering and throttle drawn on it."
        ),
    )
    names = add_fields(p, RecordConfig, skip=("scenario",), positional=("runs",))
    p.add_argument("--udacity", metavar="DIR", help="render a recorded Udacity drive (driving_log.csv + IMG/) instead")
    add_scenario_flag(p, "the episodes")
    p.set_defaults(func=run, fields=names)


def run(args: argparse.Namespace) -> int:
    from agents.figures.video import record_udacity, record_video

    if args.udacity:
        r = record_udacity(args.udacity, args.out)
        print(f"wrote {r['video']}: {r['frames']} frames at {r['fps']:.1f} fps" + (f" ({r['skipped_rows']} rows skipped)" if r["skipped_rows"] else ""))
        return 0
    result = record_video(RecordConfig(**field_values(args, args.fields), scenario=args.scenario))
    for ep in result["episodes"]:
        print(f"seed {ep['seed']}: " + ", ".join(f"{k} {v:.1f}" for k, v in ep.items() if k != "seed"))
    print(f"wrote {result['video']}")
    return 0
