"""How a run loses a track: drive its weights on one seed and print, step by step around the moment all four wheels
leave the road, the car's speed, the policy's action and the track expert's label for the same state (the expert reads
the simulator, so it labels wherever the policy has taken the car).

    python docs/studies/contrast-reference/trace.py RUN SEED [STEPS_BEFORE]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from agents.carracing.env import make_env
from agents.driving.policy import DrivingPolicy
from probe import BRAKE, EXPERT_BRAKE, EXPERT_GAS, EXPERT_STEER, GAS, SPEED, STEER, TILES, WHEELS_OFF, labelled_episode  # beside this file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder")
    parser.add_argument("seed", type=int, help="the track's seed")
    parser.add_argument("before", type=int, nargs="?", default=40, help="steps shown before the wheels leave (default 40)")
    args = parser.parse_args()
    run, seed, before = args.run, args.seed, args.before
    env = make_env(continuous=True)
    rows, _ = labelled_episode(env, DrivingPolicy.from_run(run), seed)
    tiles = len(env.unwrapped.track)
    env.close()
    off = np.flatnonzero(rows[:, WHEELS_OFF] == 4)
    first = int(off[0]) if off.size else None
    print(f"{run} on {seed}: {len(rows)} steps, {int(rows[-1, TILES])} of {tiles} tiles; all four wheels off first at step {first}")
    start = max(0, (first if first is not None else len(rows)) - before)
    print("step  speed | policy steer gas brake | expert steer gas brake | wheels off")
    for t in range(start, min(len(rows), start + before + 12), 2):
        r = rows[t]
        print(f"{t:4d} {r[SPEED]:6.1f} | {r[STEER]:+.2f} {r[GAS]:.2f} {r[BRAKE]:.2f} | {r[EXPERT_STEER]:+.2f} {r[EXPERT_GAS]:.2f} "
              f"{r[EXPERT_BRAKE]:.2f} | {int(r[WHEELS_OFF])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
