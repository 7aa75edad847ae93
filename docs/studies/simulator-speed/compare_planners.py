import json, numpy as np
n = json.load(open("docs/studies/simulator-speed/expert-compiled-planner.json")); o = json.load(open("docs/studies/simulator-speed/expert-box2d-planner.json"))
assert n["seeds"] == o["seeds"]
d = np.subtract(n["returns"], o["returns"]); half = 2.045 * d.std(ddof=1) / np.sqrt(len(d))
print(f"compiled model: {n['mean_return']:.1f} ± {n['std_return']:.1f} (min {n['min_return']:.1f}), laps {n['finished_share']:.0%}")
print(f"Box2D planner:  {o['mean_return']:.1f} ± {o['std_return']:.1f} (min {o['min_return']:.1f}), laps {o['finished_share']:.0%}")
print(f"paired new - old: {d.mean():+.2f} [{d.mean()-half:+.2f}, {d.mean()+half:+.2f}] over {len(d)} seeds; new better on {(d>0).sum()}, worse on {(d<0).sum()}, equal {(d==0).sum()}")
print("per seed diffs:", np.round(d, 1).tolist())
