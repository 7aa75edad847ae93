"""The shipped policies on the direct renderer (3x, 6x outlined; 6x filled only, the default now) against gymnasium's frames:
paired returns, P(direct > gymnasium)."""
import json, numpy as np
from agents.studies.report import probability_of_improvement
g = {r["run"]: r for r in json.load(open("docs/studies/simulator-speed/policies-gymnasium.json"))}
for name in ("direct3", "direct6", "direct6-fill"):
    d = {r["run"]: r for r in json.load(open(f"docs/studies/simulator-speed/policies-{name}.json"))}
    X = np.array([d[r]["returns"] for r in g]); Y = np.array([g[r]["returns"] for r in g])
    diff = (X - Y).mean(axis=1)
    print(name, "paired mean difference per policy:", {r.split("/")[-1]: round(float(v), 2) for r, v in zip(g, diff)})
    print("  P(direct > gymnasium) over the 6 policies x 20 seeds:", probability_of_improvement(X, Y))
