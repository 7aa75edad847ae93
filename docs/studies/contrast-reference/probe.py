"""Does a run keep steering when the patch its contrast is measured from has left the road? Drive each run on the given
tracks (the policy drives, the track expert labels every state) and count, over the steps with a wheel still on the
road, those where the patch ahead of the car (nac.driving.ahead_patch) shows more grass than road, and the policy's
steering error against the expert's label there and elsewhere. Clean scenes only: grass is a pixel whose green exceeds
its red by more than 40 (CarRacing's grass is (102, 204, 102) or (102, 229, 102), the road grey).

    python docs/studies/contrast-reference/probe.py SEEDS RUN [RUN ...]      # SEEDS: 10101,10111 or 10100..10149
"""

from __future__ import annotations

import sys

import numpy as np

from agents.carracing.env import make_env
from agents.carracing.measures import wheels_off_road
from agents.driving.policy import DrivingPolicy
from agents.experts.track import TrackFollowingExpert
from agents.training.rounds import LOST_TILES
from nac.driving import ahead_patch


def seeds_arg(text: str) -> list[int]:
    if ".." in text:
        a, b = text.split("..")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def probe(run: str, seeds: list[int]) -> dict:
    env = make_env(continuous=True)
    policy = DrivingPolicy.from_run(run)
    rows, cols = ahead_patch(96)
    errors: dict[bool, list[float]] = {True: [], False: []}
    lost = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        policy.reset()
        expert = TrackFollowingExpert(env)
        expert.reset()
        while True:
            action = np.asarray(policy.select_action(obs), dtype=float)
            label = np.asarray(expert.select_action(obs), dtype=float)
            patch = obs[rows, cols].reshape(-1, 3).astype(int)
            on_grass = int((patch[:, 1] > patch[:, 0] + 40).sum()) * 2 > len(patch)
            if wheels_off_road(env) < 4:
                errors[on_grass].append(abs(action[0] - label[0]))
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        u = env.unwrapped
        if u.tile_visited_count / len(u.track) < LOST_TILES:
            lost.append(seed)
    env.close()
    grass, road = np.array(errors[True]), np.array(errors[False])
    return {"run": run, "steps_on_grass": len(grass), "share": len(grass) / max(1, len(grass) + len(road)),
            "error_on_grass": float(grass.mean()) if len(grass) else float("nan"), "error_elsewhere": float(road.mean()), "lost": lost}


def main() -> int:
    seeds = seeds_arg(sys.argv[1])
    print("| run | on-road steps with the patch ahead on grass | steering error there | elsewhere | tracks lost |")
    print("|---|---|---|---|---|")
    for run in sys.argv[2:]:
        r = probe(run, seeds)
        print(f"| {r['run']} | {r['steps_on_grass']} ({r['share']:.1%}) | {r['error_on_grass']:.3f} | {r['error_elsewhere']:.3f} "
              f"| {', '.join(map(str, r['lost'])) or 'none'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
