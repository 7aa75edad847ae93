"""The study's answers to its issue, from its study.json and its report (report/report.json, `nacdrive study --report DIR`):

- every run's mean return and laps per scenario (the study README's table);
- heads x scenarios, IQM (the README's table);
- every group's mean per scenario against AttentionAgent's published mean, and which groups are
  above it on every scenario it was tested on while >= 915 clean and above 0 on noise; then the
  same run by run (how many runs of each group are above it, and the worst run's mean);
- what a return depends on, per scenario: the share of the returns' spread that goes with the track (its
  scenario draw), with the head, with the training run within its head, and the rest;
- P(NAC > head) per scenario over runs, with its interval (and each augmentation against the recipe without it),
  marked where the interval excludes 0.5.

    python summary.py [STUDY_DIR]   (default runs/generalization)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from agents.carracing.scenarios import CLEAN as SCENE_CLEAN
from agents.carracing.scenarios import PUBLISHED
from agents.studies.report import load, score_matrices
from agents.studies.store import EXPERT

CLEAN = "none"
ORDER = [CLEAN, "color", "color3", "bar", "blob", "noise", "domain-randomize"]
NAMES = {CLEAN: "clean"}
TARGET = PUBLISHED["AttentionAgent"]  # scenario -> (mean, std), as published (CarRacing-v0)


def must_beat(level: str) -> float | None:
    """The issue's target in a scenario: AttentionAgent's published mean, 0 on noise (it scored -58), none clean or
    under domain randomisation (never published)."""
    if level == "noise":
        return 0.0
    return TARGET[level][0] if level in ("color", "color3", "bar", "blob") else None


def per_run(study: dict) -> None:
    """Every finished run's mean return (laps of 50) per scenario, in the study's order of heads."""
    heads = study["config"]["heads"]
    order = {h: i for i, h in enumerate(dict.fromkeys([*heads, *(r.split("/")[1] for r in study["runs"])]))}
    cells: dict[tuple[str, str], list[dict]] = {}
    for e in study["episodes"]:
        cells.setdefault((e["run"], e["level"]), []).append(e)
    runs = sorted((r for r, v in study["runs"].items() if v.get("done")),
                  key=lambda r: (r.split("/")[0] != "base", r.split("/")[0], order[r.split("/")[1]], r.split("/")[2]))
    n = study["config"]["episodes"]

    def cell(es: list[dict]) -> str:
        if len(es) < n:
            return f"({len(es)} of {n})" if es else "-"
        return f"{sum(e['return'] for e in es) / len(es):.1f} ({sum(e['lap_finished'] for e in es)})"

    print(f"## Mean return (laps of {n}) per run and scenario\n\n| run | " + " | ".join(NAMES.get(lv, lv) for lv in ORDER)
          + " |\n|---|" + "---|" * len(ORDER))
    for r in runs:
        print(f"| {r} | " + " | ".join(cell(cells.get((r, lv), [])) for lv in ORDER) + " |")
    print("| expert | " + " | ".join(cell(cells.get(("expert", lv), [])) for lv in ORDER) + " |")
    print(f"\n{len(study['episodes'])} episodes, {len(runs)} runs trained\n")


def spread(study: dict) -> None:
    """Sums of squares of the base runs' returns (runs x the tracks every run drove), split as in a nested two-way
    layout: track, head, training run within its head, and the rest (how a run's return on a track departs from
    what the track and the run give alone). Written here because it is a few lines of numpy; a share near 1 for the
    track says the scenario's draw, not the architecture, decides the return."""
    print("## What a return depends on: shares of the spread of the base runs' returns\n\n"
          "| scenario | track | head | run within its head | the rest |\n|---|---|---|---|---|")
    for lv in ORDER:
        # the base variant's groups: "nac" in a one-variant study, "base/nac" beside other variants
        mats = {g.removeprefix("base/"): m for g, m in score_matrices(study, lv).items() if g != EXPERT and "/" not in g.removeprefix("base/")}
        if sum(m["scores"].shape[0] for m in mats.values()) < 2:
            continue
        seeds = sorted(set.intersection(*(set(m["seeds"]) for m in mats.values())))
        r = np.concatenate([m["scores"][:, [m["seeds"].index(s) for s in seeds]] for m in mats.values()])
        heads = [g for g, m in mats.items() for _ in m["runs"]]
        grand, run_mean = r.mean(), r.mean(1)
        head_mean = np.array([run_mean[[h == g for g in heads]].mean() for h in heads])
        total = ((r - grand) ** 2).sum()
        track = r.shape[0] * ((r.mean(0) - grand) ** 2).sum()
        head = len(seeds) * ((head_mean - grand) ** 2).sum()
        run = len(seeds) * ((run_mean - head_mean) ** 2).sum()
        print(f"| {NAMES.get(lv, lv)} | {track / total:.2f} | {head / total:.2f} | {run / total:.2f} | {(total - track - head - run) / total:.2f} |")
    print()


def main(study_dir: Path) -> None:
    study = load(study_dir)
    per_run(study)
    spread(study)
    if not (study_dir / "report" / "report.json").exists():
        sys.exit(f"no report yet: nacdrive study --report {study_dir}")
    report = json.loads((study_dir / "report" / "report.json").read_text())
    levels = [lv for lv in ORDER if lv in report["levels"]]
    groups = [g for g in report["levels"][CLEAN]["aggregates"] if g != "expert"]
    agg = {lv: report["levels"][lv]["aggregates"] for lv in levels}
    head = "| group | " + " | ".join(NAMES.get(lv, lv) for lv in levels) + " |\n|---|" + "---|" * len(levels)

    print("## IQM [95 % CI] per scenario\n\n" + head)
    for g in groups + ["expert"]:
        cells = [f"{agg[lv][g]['iqm']:.1f}" + (f" [{agg[lv][g]['iqm_ci'][0]:.0f}, {agg[lv][g]['iqm_ci'][1]:.0f}]" if agg[lv][g]["iqm_ci"] else "")
                 for lv in levels]
        print(f"| {g} | " + " | ".join(cells) + " |")

    print("\n## Mean per scenario against AttentionAgent's published mean (marked * where above it)\n\n" + head)
    above_all = []
    for g in groups:
        cells, ok = [], agg[CLEAN][g]["mean"] >= 915
        for lv in levels:
            mean, bar = agg[lv][g]["mean"], must_beat(lv)
            ok = ok and (bar is None or mean > bar)
            cells.append(f"{mean:.1f}{'*' if bar is not None and mean > bar else ''}")
        print(f"| {g} | " + " | ".join(cells) + " |")
        if ok:
            above_all.append(g)
    published = " | ".join(str(TARGET[SCENE_CLEAN if lv == CLEAN else lv][0]) if (SCENE_CLEAN if lv == CLEAN else lv) in TARGET else "-" for lv in levels)
    print(f"| AttentionAgent (published) | {published} |")
    print(f"\nAbove AttentionAgent on color, color3, bar and blob, above 0 on noise, and >= 915 clean (means): {', '.join(above_all) or 'none'}")

    print("\n## Each run against the target: the runs (of 3) whose mean is above AttentionAgent's published mean (above 0 on "
          "noise; >= 915 clean), and the worst run's mean\n\n" + head)
    for g in groups:
        cells = []
        for lv in levels:
            runs, bar = agg[lv][g]["run_means"], (915.0 if lv == CLEAN else must_beat(lv))
            worst = min(runs)
            cells.append(f"{worst:.1f}" if bar is None else f"{sum(m > bar or (lv == CLEAN and m >= bar) for m in runs)} of {len(runs)} ({worst:.1f})")
        print(f"| {g} | " + " | ".join(cells) + " |")

    print("\n## P(X > Y) over runs [95 % CI] per scenario (! where the interval excludes 0.5): NAC against each head, and each "
          "augmentation against NAC's recipe without it\n\n" + head.replace("group", "comparison"))
    for pair in report["levels"][CLEAN]["improvement"]:
        cells = []
        for lv in levels:
            p = report["levels"][lv]["improvement"].get(pair)
            lo, hi = (p or {}).get("ci") or (None, None)
            mark = "!" if lo is not None and (lo > 0.5 or hi < 0.5) else ""
            cells.append("-" if p is None else f"{p['p']:.2f} [{lo:.2f}, {hi:.2f}]{mark}" if lo is not None else f"{p['p']:.2f}")
        print(f"| {pair} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/generalization"))
