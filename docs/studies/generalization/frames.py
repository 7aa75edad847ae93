"""One observation of each scenario on the same track and state: frames.png (docs/scenarios.md).

    .venv/bin/python docs/studies/generalization/frames.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from agents.carracing.env import make_env  # noqa: E402
from agents.experts import make_expert  # noqa: E402
from agents.carracing.scenarios import SCENARIOS  # noqa: E402

SEED, STEPS = 10003, 120  # a held-out track, past the opening zoom, the expert driving

fig, axes = plt.subplots(1, len(SCENARIOS), figsize=(2.2 * len(SCENARIOS), 2.6))
for ax, name in zip(axes, SCENARIOS):
    env = make_env(True, scenario=name)
    obs, _ = env.reset(seed=SEED)
    expert = make_expert("track", env)
    expert.reset()
    for _ in range(STEPS):
        obs = env.step(expert.select_action(obs))[0]
    ax.imshow(np.asarray(obs), interpolation="nearest")
    ax.set_title(name, fontsize=10)
    ax.axis("off")
fig.suptitle(f"The observation a policy sees (96 x 96), held-out seed {SEED}, step {STEPS}", fontsize=10)
fig.tight_layout()
out = Path(__file__).with_name("frames.png")
fig.savefig(out, dpi=110)
print(f"wrote {out}")
