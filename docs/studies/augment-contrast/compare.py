"""Two variants of the same recipe (full-randmix), run by run, per scene, on the validation tracks 10100..10109: each
run's mean, each group's mean with its 95 % interval over runs and tracks, and P(X > Y) over runs with its interval
(agents.studies). The variants are read from this study's study files (study*.json) and augment-runs' (randmix).
Run from the repository root: python docs/studies/augment-contrast/compare.py [X Y]  (default: rc randmix)"""
import collections
import glob
import json
import sys

import numpy as np

from agents.studies.aggregates import probability_of_improvement
from agents.studies.stats import interval, mean

SCENES = ["none", "color", "color3", "bar", "blob", "noise", "photos", "domain-randomize"]
FILES = sorted(glob.glob("docs/studies/augment-contrast/study*.json")) + ["docs/studies/augment-runs/study.json"]  # this
# study's screens and rounds, each in a study file of its own, and randmix's runs
x_name, y_name = sys.argv[1:3] if len(sys.argv) == 3 else ("rc", "randmix")
returns = collections.defaultdict(dict)  # (variant, scene) -> {seed: {track: return}}
for path in FILES:
    for e in json.load(open(path))["episodes"]:
        if e["variant"] in (x_name, y_name) and e["head"] == "nac":
            returns[(e["variant"], e["level"])].setdefault(e["seed"], {})[e["episode_seed"]] = e["return"]


def matrix(group: str, scene: str) -> np.ndarray:
    runs = returns[(group, scene)]
    tracks = sorted(next(iter(runs.values())))
    return np.array([[runs[s][t] for t in tracks] for s in sorted(runs) if len(runs[s]) == len(tracks)])


print(f"| scene | {x_name} runs | {y_name} runs | {x_name} mean [95 %] | {y_name} mean [95 %] | P({x_name} > {y_name}) [95 %] |")
print("|---|---|---|---|---|---|")
for scene in SCENES:
    x, y = matrix(x_name, scene), matrix(y_name, scene)
    fmt = lambda m: ", ".join(f"{v:.0f}" for v in m.mean(1))  # noqa: E731
    ci = lambda m: interval(mean, m, bounds=(-100, 1000))  # noqa: E731
    span = lambda m: f"{m.mean():.0f}" + (" [{:.0f}, {:.0f}]".format(*ci(m)) if ci(m) else "")  # noqa: E731
    p = probability_of_improvement(x, y)
    pci = " [{:.2f}, {:.2f}]".format(*p["ci"]) if p["ci"] else ""
    print(f"| {'clean' if scene == 'none' else scene} | {fmt(x)} | {fmt(y)} | {span(x)} | {span(y)} | {p['p']:.2f}{pci} |")
