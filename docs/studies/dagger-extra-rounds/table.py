"""The tables of docs/studies/dagger-extra-rounds/README.md from the evaluations stored beside it: each kept round's
weights on the 50 validation tracks and the 50 selection tracks, the tracks each lost, and which round each rule keeps;
then the mean of the rounds' weights from round 2 on (`dagger_average`) against the last round's own.

    python docs/studies/dagger-extra-rounds/table.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from agents.carracing.measures import track_bends
from agents.training.rounds import LOST_TILES as LOST  # fewer of its track's tiles than this: the track is lost

HERE = Path(__file__).parent


def rows(name: str) -> dict[tuple[str, int | str], dict]:
    """{(run, round): evaluate's row} from an `nacdrive evaluate --json` file of folders named HEAD-seedS-rR (a round's
    own weights), HEAD-seedS-avg (the mean of rounds 2..last) or HEAD-seedS-last (the last round's own)."""
    out = {}
    for row in json.loads((HERE / name).read_text()):
        m = re.fullmatch(r"(.+)-(seed\d+)-(?:r(\d+)|(avg|last))", Path(row["run"].rstrip("/")).name)
        out[(f"{m[1]}/{m[2]}", int(m[3]) if m[3] else m[4])] = row
    return out


def lost(row: dict) -> str:
    tracks = [f"{s} ({r:.0f})" for s, r, t in zip(row["seeds"], row["returns"], row["tiles"]) if t < LOST]
    return ", ".join(tracks) or "none"


def main() -> int:
    val, sel = rows("val-10100.json"), rows("select-20000.json")
    print("| run | round | validation 10100..10149 | lost there | selection 20000..20049 | lost there |")
    print("|---|---:|---:|---|---:|---|")
    for run, k in sorted(val):
        v, s = val[(run, k)], sel[(run, k)]
        print(f"| {run} | {k} | {v['mean_return']:.1f} | {lost(v)} | {s['mean_return']:.1f} | {lost(s)} |")
    print()
    print("| run | last round (the recipe) | round 2 (no extra rounds) | select drive (best on selection, later wins a tie) |")
    print("|---|---|---|---|")
    for run in sorted({r for r, _ in val}):
        ks = sorted(k for r, k in val if r == run)
        pick = max(ks, key=lambda k: (sel[(run, k)]["mean_return"], k))
        cell = lambda k: f"r{k}: {val[(run, k)]['mean_return']:.1f}"  # noqa: E731
        print(f"| {run} | {cell(ks[-1])} | {cell(ks[0])} | {cell(pick)} |")
    # the mean of rounds 2..last: the grid's four runs (their last round above), and two more NAC runs with four rounds
    avg_val, avg_sel, more = rows("avg-val-10100.json"), rows("avg-select-20000.json"), rows("avg-nac-val-10100.json")
    print()
    print("| run | rounds averaged | validation: last round / mean of rounds | lost there | selection: last round / mean | lost there |")
    print("|---|---|---|---|---|---|")
    for run in sorted({r for r, _ in avg_val}):
        last = max(k for r, k in val if r == run)
        v, s = avg_val[(run, "avg")], avg_sel[(run, "avg")]
        print(f"| {run} (final grid) | 2..{last} | {val[(run, last)]['mean_return']:.1f} / {v['mean_return']:.1f} | {lost(val[(run, last)])} / {lost(v)} "
              f"| {sel[(run, last)]['mean_return']:.1f} / {s['mean_return']:.1f} | {lost(sel[(run, last)])} / {lost(s)} |")
    for run in sorted({r for r, _ in more}):
        a, b = more[(run, "last")], more[(run, "avg")]
        print(f"| {run} (augment-contrast ras) | 2..4 | {a['mean_return']:.1f} / {b['mean_return']:.1f} | {lost(a)} / {sum(t < LOST for t in b['tiles'])} tracks | - | - |")
    # the lost tracks' sharpest bends, against every track of the two ranges
    every = sorted({s for r in [*val.values(), *sel.values()] for s in r["seeds"]})
    lost_seeds = sorted({s for r in [*val.values(), *sel.values()] for s, t in zip(r["seeds"], r["tiles"]) if t < LOST})
    bends = track_bends(every)
    print()
    print("lost tracks, sharpest bend (degrees):", ", ".join(f"{s} {bends[s]:.0f}" for s in lost_seeds))
    print(f"of all {len(every)} tracks, {sum(b >= 150 for b in bends.values())} bend 150 degrees or more, "
          f"{sum(b >= 165 for b in bends.values())} 165 or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
