"""Does a run keep steering when the patch its contrast is measured from has left the road? Drive each run on the given
tracks (the policy drives, the track expert labels every state) and count, over the steps with a wheel still on the
road, those where the patch ahead of the car (nac.driving.ahead_patch) shows more grass than road, and the policy's
steering error against the expert's label there and elsewhere. Grass is a pixel whose green exceeds its red by more
than 40 (CarRacing's grass is (102, 204, 102) or (102, 229, 102), the road grey), read in the clean frame of the same
state: in another scene (--scenario) the policy sees that scene and the patch is judged on the state drawn clean.

    python docs/studies/contrast-reference/probe.py SEEDS RUN [RUN ...]      # SEEDS: 10101,10111 or 10100..10149
    python docs/studies/contrast-reference/probe.py --scenario photos SEEDS RUN [RUN ...]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from agents.carracing.env import make_env
from agents.carracing.measures import wheels_off_road
from agents.carracing.scenarios import CLEAN, SCENARIOS, Scenario
from agents.driving.policy import DrivingPolicy
from agents.driving.rollout import EpisodeResult, run_episode
from agents.experts.track import TrackFollowingExpert
from agents.training.rounds import LOST_TILES
from nac.driving import ahead_patch

ROWS, COLS = ahead_patch(96)
# the columns of labelled_episode's rows
SPEED, STEER, GAS, BRAKE, EXPERT_STEER, EXPERT_GAS, EXPERT_BRAKE, WHEELS_OFF, TILES, PATCH_ON_GRASS = range(10)


class Labelled:
    """run_episode's observer for one episode: each step's row (the columns above), the track expert labelling the state
    the policy has taken the car to (it reads the simulator) before the policy's action is taken."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self.expert: TrackFollowingExpert | None = None

    def before_step(self, env: gym.Env, obs: Any, action: Any) -> None:
        if self.expert is None:  # the episode's first step: the track is the one reset drew
            self.expert = TrackFollowingExpert(env)
            self.expert.reset()
        label = np.asarray(self.expert.select_action(obs), dtype=float)
        u = env.unwrapped
        patch = (obs if u.scenario.name == CLEAN else clean_frame(u))[ROWS, COLS].reshape(-1, 3).astype(int)
        on_grass = int((patch[:, 1] > patch[:, 0] + 40).sum()) * 2 > len(patch)
        self.rows.append((float(np.linalg.norm(u.car.hull.linearVelocity)), *np.asarray(action, dtype=float), *label,
                          wheels_off_road(env), u.tile_visited_count, on_grass))

    def after_step(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        pass


def clean_frame(u: gym.Env) -> np.ndarray:
    """The observation the unwrapped env would give in its present state with the clean scenario."""
    scene, u.scenario = u.scenario, Scenario(CLEAN)
    try:
        return u._render("state_pixels")
    finally:
        u.scenario = scene


def labelled_episode(env: gym.Env, policy: DrivingPolicy, seed: int) -> tuple[np.ndarray, EpisodeResult]:
    """One episode of the policy on `seed`: its rows (the columns above) and its result."""
    seen = Labelled()
    result = run_episode(env, policy, seed, seen)
    return np.array(seen.rows), result


def seeds_arg(text: str) -> list[int]:
    if ".." in text:
        a, b = text.split("..")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def probe(run: str, seeds: list[int], scenario: str = CLEAN) -> dict:
    env = make_env(continuous=True, scenario=scenario)
    policy = DrivingPolicy.from_run(run)
    steps, lost = [], []
    for seed in seeds:
        rows, result = labelled_episode(env, policy, seed)
        steps.append(rows[rows[:, WHEELS_OFF] < 4])  # a wheel still on the road
        if result.tiles_visited < LOST_TILES:
            lost.append(seed)
    env.close()
    rows = np.concatenate(steps)
    error = np.abs(rows[:, STEER] - rows[:, EXPERT_STEER])
    on_grass = rows[:, PATCH_ON_GRASS] == 1
    grass, road = error[on_grass], error[~on_grass]
    return {"run": run, "steps_on_grass": len(grass), "share": len(grass) / max(1, len(rows)),
            "error_on_grass": float(grass.mean()) if len(grass) else float("nan"), "error_elsewhere": float(road.mean()), "lost": lost}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=CLEAN, choices=SCENARIOS, help="the scene the policy drives (default: clean)")
    parser.add_argument("seeds", type=seeds_arg, help="tracks: 10101,10111 or 10100..10149")
    parser.add_argument("runs", nargs="+", help="run folders")
    args = parser.parse_args()
    print("| run | on-road steps with the patch ahead on grass | steering error there | elsewhere | tracks lost |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        r = probe(run, args.seeds, args.scenario)
        print(f"| {r['run']} | {r['steps_on_grass']} ({r['share']:.1%}) | {r['error_on_grass']:.3f} | {r['error_elsewhere']:.3f} "
              f"| {', '.join(map(str, r['lost'])) or 'none'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
