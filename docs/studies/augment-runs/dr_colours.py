"""Under gymnasium's domain_randomize, which tracks do the runs drive? Each validation track's road and background
colours (as the scenario draws them from the track's seed) beside the mean of every run of `f` and of `randmix` on it,
and the rank correlation of the luminance gap (background minus road) with those means. Run from the repository root:
python docs/studies/augment-runs/dr_colours.py"""
import collections
import json

import numpy as np
from scipy.stats import spearmanr

from agents.carracing.env import make_env

LUMA = np.array([0.299, 0.587, 0.114])
study = json.load(open("docs/studies/augment-runs/study.json"))
returns = collections.defaultdict(list)  # (variant, track) -> the returns of every run on it
for e in study["episodes"]:
    if e["level"] == "domain-randomize":
        returns[("expert" if e["head"] == "expert" else e["variant"], e["episode_seed"])].append(e["return"])
tracks = sorted({s for v, s in returns if v == "randmix"})
env = make_env(continuous=True, scenario="domain-randomize", pixels=False)
print("| track | road RGB | background RGB | luma gap (background - road) | randmix (5 runs) | f (5 runs) | expert |")
print("|---|---|---|---:|---:|---:|---:|")
gaps = []
for s in tracks:
    env.reset(seed=s)
    road, background = env.unwrapped.road_color, env.unwrapped.bg_color
    gaps.append(float((background - road) @ LUMA))
    print(f"| {s} | {np.round(road).astype(int).tolist()} | {np.round(background).astype(int).tolist()} | {gaps[-1]:+.0f} | "
          + " | ".join(f"{np.mean(returns[(v, s)]):.0f}" for v in ("randmix", "f", "expert")) + " |")
for v in ("randmix", "f"):
    rho = spearmanr(gaps, [np.mean(returns[(v, s)]) for s in tracks])
    print(f"Spearman(luma gap, {v}'s track means) = {rho.statistic:.2f} (p = {rho.pvalue:.4f}, {len(tracks)} tracks)")
