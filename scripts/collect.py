"""`nacdrive collect` and `nacdrive data info|check|export-minari`: record, inspect and export demonstrations."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agents.training.collect import CollectConfig
from scripts.options import add_fields, field_values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collect",
        help="record expert demonstrations in CarRacing",
        description=(
            "Drives CarRacing-v3 episodes with an expert and records, per episode, the 96x96 RGB frames "
            "(lossless), the expert's actions, rewards, termination flags, timestamps and the car's "
            "privileged state, one file per episode plus manifest.json. An existing non-empty folder is "
            "refused unless --resume (complete an interrupted run) or --append (add episodes)."
        ),
    )
    names = add_fields(p, CollectConfig)
    p.set_defaults(func=run_collect, fields=names)

    d = sub.add_parser("data", help="inspect a demonstration set", description="Inspect a demonstration set.")
    jobs = d.add_subparsers(dest="job", metavar="JOB", required=True, parser_class=type(d))
    i = jobs.add_parser("info", help="episodes, frames, actions, returns, disk size", description="Summary of a demonstration set.")
    i.add_argument("data", type=Path, metavar="DATA")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.set_defaults(func=run_info)
    c = jobs.add_parser("check", help="verify every file against the manifest", description=(
        "Verifies each episode file listed in manifest.json (present, SHA-256, readable, seed, length, return) "
        "and reports files the manifest does not list. Exit status 1 when anything is wrong."))
    c.add_argument("data", type=Path, metavar="DATA")
    c.set_defaults(func=run_check)
    m = jobs.add_parser("export-minari", help="write the set as a Minari dataset (Farama's offline-RL format)", description=(
        "Writes the demonstration set as a Minari dataset: per episode the T + 1 frames (the one after the last "
        "step included; raw uint8, not JPEG), actions, rewards, termination flags and seed, with CarRacing's "
        "environment spec. Load it with minari.load_dataset(ID) (set MINARI_DATASETS_PATH to --root first if "
        "you gave one). Sets recorded before the final frame was kept must be recorded again."))
    m.add_argument("data", type=Path, metavar="DATA", help="demonstration folder (from nacdrive collect)")
    m.add_argument("--dataset-id", metavar="ID", help="Minari id, (namespace/)name-vN (default: nacdrive/CarRacing-<expert>-<actions>-v0)")
    m.add_argument("--root", type=Path, metavar="DIR", help="datasets folder (default: Minari's, $MINARI_DATASETS_PATH or ~/.minari/datasets)")
    m.set_defaults(func=run_export_minari)


def _print_info(info: dict) -> None:
    print(f"{info['folder']}: {info['episodes']} episodes, {info['frames']} frames, "
          f"{info['action_space']} actions, expert {info['expert']}, seeds {info['seeds']}, "
          f"{info['disk_bytes'] / 2**20:.1f} MB on disk")
    if info["episodes"]:
        print(f"returns: mean {info['mean_return']:.1f} +- {info['std_return']:.1f}, min {info['min_return']:.1f}, "
              f"max {info['max_return']:.1f}; laps finished {info['laps_finished']}/{info['episodes']}")
        acts = info["actions"]
        if all(isinstance(v, int) for v in acts.values()):
            total = sum(acts.values()) or 1
            print("actions: " + ", ".join(f"{k} {v} ({v / total:.0%})" for k, v in acts.items()))
        else:
            print("actions: " + ", ".join(f"{k} {v['mean']:.2f} +- {v['std']:.2f}" for k, v in acts.items()))


def run_collect(args: argparse.Namespace) -> int:
    from agents.training.collect import collect

    _print_info(collect(CollectConfig(**field_values(args, args.fields))))
    return 0


def run_info(args: argparse.Namespace) -> int:
    from datasets.demos import DemoSet

    info = DemoSet(args.data).info()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_info(info)
    return 0


def run_export_minari(args: argparse.Namespace) -> int:
    from datasets.demos import DemoSet
    import agents.carracing.env  # noqa: F401  registers nacdrive/CarRacing-v3, the environment recordings name
    from datasets.minari_export import export_minari

    out = export_minari(DemoSet(args.data), args.dataset_id, args.root)
    print(f"{out['dataset_id']}: {out['episodes']} episodes, {out['steps']} steps in {out['path']}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from datasets.demos import DemoSet

    demos = DemoSet(args.data)
    problems = demos.check()
    for line in problems:
        print(line)
    if problems:
        print(f"{args.data}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{args.data}: all {len(demos.episodes)} episodes match the manifest")
    return 0
