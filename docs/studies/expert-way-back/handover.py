"""A policy drives until all four wheels have been off the road K steps in a row; then the track expert drives on.
Prints per track: the step of the handover (None: the policy never left the road), the return, the share of tiles.
Run from the repository's root (a run folder, K, tracks):

    python docs/studies/expert-way-back/handover.py runs/quickstart/nac 10 10000,10007
"""

import sys

from agents.carracing.env import make_env, wheels_off_road
from agents.driving.policy import DrivingPolicy
from agents.experts.track import TrackFollowingExpert


def main() -> None:
    run, k, seeds = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
    policy = DrivingPolicy.from_run(run)
    for seed in seeds:
        env = make_env(continuous=policy.continuous)
        obs, _ = env.reset(seed=seed)
        expert = TrackFollowingExpert(env)
        expert.reset()
        policy.reset()
        total, off, handed = 0.0, 0, None
        for t in range(1000):
            label, action = expert.select_action(obs), policy.select_action(obs)  # the expert follows the car throughout
            if handed is None and off >= k:
                handed = t
            obs, reward, terminated, truncated, _ = env.step(label if handed is not None else action)
            total += reward
            off = off + 1 if wheels_off_road(env) == 4 else 0
            if terminated or truncated:
                break
        print(seed, handed, round(total, 1), round(env.unwrapped.tile_visited_count / len(env.unwrapped.track), 3), flush=True)


if __name__ == "__main__":
    main()
