"""How a run loses a track: drive its weights on one seed and print, step by step around the moment all four wheels
leave the road, the car's speed, the policy's action and the track expert's label for the same state (the expert reads
the simulator, so it labels wherever the policy has taken the car).

    python docs/studies/contrast-reference/trace.py RUN SEED [STEPS_BEFORE]
"""

from __future__ import annotations

import sys

import numpy as np

from agents.carracing.env import make_env
from agents.carracing.measures import wheels_off_road
from agents.driving.policy import DrivingPolicy
from agents.experts.track import TrackFollowingExpert


def trace(run: str, seed: int) -> tuple[np.ndarray, int]:
    """Per step: speed, the policy's steer, gas, brake, the expert's, wheels off the road, tiles reached; and the track's tiles."""
    env = make_env(continuous=True)
    policy = DrivingPolicy.from_run(run)
    obs, _ = env.reset(seed=seed)
    policy.reset()
    expert = TrackFollowingExpert(env)
    expert.reset()
    rows = []
    while True:
        action = np.asarray(policy.select_action(obs), dtype=float)
        label = np.asarray(expert.select_action(obs), dtype=float)
        speed = float(np.linalg.norm(env.unwrapped.car.hull.linearVelocity))
        rows.append((speed, *action, *label, wheels_off_road(env), env.unwrapped.tile_visited_count))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            tiles = len(env.unwrapped.track)
            env.close()
            return np.array(rows), tiles


def main() -> int:
    run, seed = sys.argv[1], int(sys.argv[2])
    before = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    rows, tiles = trace(run, seed)
    off = np.flatnonzero(rows[:, 7] == 4)
    first = int(off[0]) if off.size else None
    print(f"{run} on {seed}: {len(rows)} steps, {int(rows[-1, 8])} of {tiles} tiles; all four wheels off first at step {first}")
    start = max(0, (first if first is not None else len(rows)) - before)
    print("step  speed | policy steer gas brake | expert steer gas brake | wheels off")
    for t in range(start, min(len(rows), start + before + 12), 2):
        v, s, g, b, es, eg, eb, w, _ = rows[t]
        print(f"{t:4d} {v:6.1f} | {s:+.2f} {g:.2f} {b:.2f} | {es:+.2f} {eg:.2f} {eb:.2f} | {int(w)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
