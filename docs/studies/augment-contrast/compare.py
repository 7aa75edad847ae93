"""rc (the frame and its contrast) against randmix (the frame alone), the same recipe otherwise (full-randmix), run by
run, per scene, on the validation tracks 10100..10109: each run's mean, each group's mean with its 95 % interval over
runs and tracks, and P(rc > randmix) over runs with its interval (agents.studies). randmix's runs are augment-runs'.
Run from the repository root: python docs/studies/augment-contrast/compare.py"""
import collections
import json

import numpy as np

from agents.studies.aggregates import probability_of_improvement
from agents.studies.stats import interval, mean

SCENES = ["none", "color", "color3", "bar", "blob", "noise", "photos", "domain-randomize"]
GROUPS = {"rc": "docs/studies/augment-contrast/study.json", "randmix": "docs/studies/augment-runs/study.json"}
returns = collections.defaultdict(dict)  # (group, scene) -> {seed: {track: return}}
for group, path in GROUPS.items():
    for e in json.load(open(path))["episodes"]:
        if e["variant"] == group and e["head"] == "nac":
            returns[(group, e["level"])].setdefault(e["seed"], {})[e["episode_seed"]] = e["return"]


def matrix(group: str, scene: str) -> np.ndarray:
    runs = returns[(group, scene)]
    tracks = sorted(next(iter(runs.values())))
    return np.array([[runs[s][t] for t in tracks] for s in sorted(runs) if len(runs[s]) == len(tracks)])


print("| scene | rc runs | randmix runs | rc mean [95 %] | randmix mean [95 %] | P(rc > randmix) [95 %] |")
print("|---|---|---|---|---|---|")
for scene in SCENES:
    x, y = matrix("rc", scene), matrix("randmix", scene)
    fmt = lambda m: ", ".join(f"{v:.0f}" for v in m.mean(1))  # noqa: E731
    ci = lambda m: interval(mean, m, bounds=(-100, 1000))  # noqa: E731
    span = lambda m: f"{m.mean():.0f}" + (" [{:.0f}, {:.0f}]".format(*ci(m)) if ci(m) else "")  # noqa: E731
    p = probability_of_improvement(x, y)
    pci = " [{:.2f}, {:.2f}]".format(*p["ci"]) if p["ci"] else ""
    print(f"| {'clean' if scene == 'none' else scene} | {fmt(x)} | {fmt(y)} | {span(x)} | {span(y)} | {p['p']:.2f}{pci} |")
