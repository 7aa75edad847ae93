"""Under gymnasium's domain_randomize, which tracks do the contrast-input runs drive? Each validation track's road and
background colours (as the scenario draws them from the track's seed), the road's colour distance from the background
as a multiple of the clean scene's (the contrast input's road brightness against what training showed), and the mean
return on it of each variant of this study and of augment-runs' `randmix` (5 runs). Run from the repository root:
python docs/studies/augment-contrast/dr_contrast.py"""
import collections
import json

import numpy as np

from agents.carracing.env import make_env
from agents.carracing.scenarios import BACKGROUND, ROAD

returns = collections.defaultdict(list)  # (variant, track) -> the returns of every run on it
for path, keep in (("docs/studies/augment-contrast/study.json", None), ("docs/studies/augment-runs/study.json", "randmix")):
    for e in json.load(open(path))["episodes"]:
        if e["level"] == "domain-randomize" and e["head"] != "expert" and keep in (None, e["variant"]):
            returns[(e["variant"], e["episode_seed"])].append(e["return"])
variants = sorted({v for v, _ in returns}, key=lambda v: (v == "randmix", v))
tracks = sorted({s for _, s in returns})
clean = np.linalg.norm(BACKGROUND - ROAD)
env = make_env(continuous=True, scenario="domain-randomize", pixels=False)
print("| track | road RGB | background RGB | road contrast (x clean's) | " + " | ".join(f"`{v}`" for v in variants) + " |")
print("|---|---|---|---:|" + "---:|" * len(variants))
for s in tracks:
    env.reset(seed=s)
    road, background = env.unwrapped.road_color, env.unwrapped.bg_color
    ratio = np.linalg.norm(background - road) / clean
    print(f"| {s} | {np.round(road).astype(int).tolist()} | {np.round(background).astype(int).tolist()} | {ratio:.2f} | "
          + " | ".join(f"{np.mean(returns[(v, s)]):.0f}" for v in variants) + " |")
