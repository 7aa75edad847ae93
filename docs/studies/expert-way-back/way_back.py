"""The track expert's way back from the grass, on tuning tracks: a car driven on with gas alone (no steering) until its
centre is D units off the centreline, then the expert drives. Prints the steps until the car's centre is back on the
road (2 units inside its edge; 300: never, in the 300 steps given) and the road tiles it reaches in those 300 steps.
Run from the repository's root:

    python docs/studies/expert-way-back/way_back.py discrete 10 200 30
"""

import sys

import numpy as np

from agents.carracing.env import make_env
from agents.experts.track import ROAD_HALF_WIDTH, TrackFollowingExpert


def main() -> None:
    space, distance, first, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    continuous = space == "continuous"
    env = make_env(continuous, pixels=False)
    expert = TrackFollowingExpert(env)
    gas = np.array([0.0, 1.0, 0.0], dtype=np.float32) if continuous else 3
    backs, tiles = [], []
    for seed in range(first, first + count):
        env.reset(seed=seed)
        expert.reset()
        car, centre = env.unwrapped.car, np.array([(t[2], t[3]) for t in env.unwrapped.track])

        def off() -> float:  # the car's centre from the nearest centreline point
            return float(np.min(np.hypot(*(centre - np.array(car.hull.position)).T)))

        for _ in range(400):
            expert.select_action()  # follows the car along its line
            env.step(gas)
            if off() > distance:
                break
        start, back = env.unwrapped.tile_visited_count, 300
        for t in range(300):
            env.step(expert.select_action())
            if back == 300 and off() < ROAD_HALF_WIDTH - 2:
                back = t
        backs.append(back)
        tiles.append(env.unwrapped.tile_visited_count - start)
    print(f"{space}, {distance:g} units off, tracks {first}..{first + count - 1}: steps back median {np.median(backs):.0f}, "
          f"mean {np.mean(backs):.1f}, never {sum(b == 300 for b in backs)}; tiles reached in 300 steps: mean {np.mean(tiles):.1f}")


if __name__ == "__main__":
    main()
