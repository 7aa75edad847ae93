"""`nacdrive quickstart`: the README's main job."""

from __future__ import annotations

import argparse

from scripts import bench


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="the main job on its embedded default (for now: a short NAC benchmark)",
        description="Runs a short NAC benchmark (T=1024, three passes) so a fresh install shows NAC working.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return bench.run(argparse.Namespace(seq_len=1024, passes=3, max_len=2048, threads=0, skip_pairwise=True, json=None))
