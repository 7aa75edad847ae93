"""Does a run's own last DAgger check show that it is weak? For every continuous CarRacing run of every study in
docs/studies whose check episodes were recorded: the mean and the worst episode of the check that judged the weights the
run kept (the last one recorded), beside the run's mean and laps on its held-out tracks (clean). Prints the runs in
order of held-out mean, then how many runs each threshold on the check's worst episode flags and what it misses.
Run from the repository root: python docs/studies/recipe-reliability/check_worst.py"""
import glob
import json

import numpy as np

WEAK = 910.0  # a held-out mean below this: a weak run (the expert drives about 920 on every range of tracks)
rows = []
for path in sorted(glob.glob("docs/studies/*/study.json")):
    study = json.load(open(path))
    if study["config"].get("task", "carracing") != "carracing" or not study["config"].get("continuous", True):
        continue
    held_out: dict[str, list[tuple[float, bool]]] = {}
    for e in study["episodes"]:
        if e["level"] == "none" and e["run"] != "expert":
            held_out.setdefault(e["run"], []).append((e["return"], e["lap_finished"]))
    for key, run in study["runs"].items():
        checks = [(m, w) for m, w in zip(run.get("dagger_check_returns") or [], run.get("dagger_check_worst") or []) if m is not None]
        if not checks or key not in held_out:
            continue
        returns = np.array([r for r, _ in held_out[key]])
        laps = np.mean([lap for _, lap in held_out[key]])
        rows.append((path.split("/")[2], key, *checks[-1], returns.mean(), laps, len(returns)))

rows.sort(key=lambda r: r[4])
print("| study | run | check mean | check worst | held-out mean | laps | tracks |")
print("|---|---|---|---|---|---|---|")
for study, key, mean, worst, held, laps, n in rows[:12]:
    print(f"| {study} | {key} | {mean:.1f} | {worst:.1f} | {held:.1f} | {laps:.0%} | {n} |")
worst, held = np.array([r[3] for r in rows]), np.array([r[4] for r in rows])
print(f"\n{len(rows)} runs, {int((held < WEAK).sum())} weak (held-out mean < {WEAK:g})")
for threshold in (880, 890, 900, 905):
    flag = worst < threshold
    print(f"check worst < {threshold}: flags {int(flag.sum())} runs, {int((held[flag] < WEAK).sum())} of them weak; "
          f"misses {int((held[~flag] < WEAK).sum())} weak runs (the lowest it passes: {held[~flag].min():.1f})")
