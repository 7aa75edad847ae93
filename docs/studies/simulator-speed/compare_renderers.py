"""The shipped policies on the direct renderer (3x, 6x outlined; 6x filled only, the default now) against gymnasium's frames:
each policy's mean paired difference (the same policy on the same tracks), and their mean over the six policies with a
95 % t-interval: the policy is the unit (the study-report's P(X > Y) is for independent runs, not for one policy twice)."""
import json, numpy as np
from scipy.stats import t
g = {r["run"]: r for r in json.load(open("docs/studies/simulator-speed/policies-gymnasium.json"))}
for name in ("direct3", "direct6", "direct6-fill"):
    d = {r["run"]: r for r in json.load(open(f"docs/studies/simulator-speed/policies-{name}.json"))}
    diff = np.array([np.mean(np.array(d[r]["returns"]) - np.array(g[r]["returns"])) for r in g])
    print(name, "paired mean difference per policy:", {r.split("/")[-1]: round(float(v), 2) for r, v in zip(g, diff)})
    half = t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
    print(f"  over the {len(diff)} policies: {diff.mean():+.2f} [{diff.mean() - half:+.2f}, {diff.mean() + half:+.2f}]")
