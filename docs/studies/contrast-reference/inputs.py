"""Which of a run's inputs breaks it in a scene: drive the scene with the CNN given the RGB channels of one rendering of
each state and the contrast channel of another (the scene as drawn, or the same state drawn clean), and print each
pairing's returns. The network's own `see` builds both renderings' inputs; this script only chooses which rendering each
channel comes from, for a one-frame forward (closed loop encodes each new frame alone). A diagnostic: the project's
commands never render a state twice.

    python docs/studies/contrast-reference/inputs.py SCENARIO SEEDS RUN [RUN ...]     # SEEDS: 10100,10105 or 10100..10149
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agents.carracing.env import make_env
from agents.carracing.scenarios import CLEAN, SCENARIOS
from agents.driving.policy import DrivingPolicy
from agents.driving.rollout import run_episode
from nac.driving import DrivingNet
from probe import clean_frame, seeds_arg  # beside this file

PAIRINGS = (("scene", "scene"), ("scene", "clean"), ("clean", "scene"))  # (RGB from, contrast from)


class CleanRendering(gym.Wrapper):
    """The env, keeping the last state drawn clean (`clean`) for the network's see."""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.clean = clean_frame(self.env.unwrapped)
        return obs, info

    def step(self, action: Any):
        out = self.env.step(action)
        self.clean = clean_frame(self.env.unwrapped)
        return out


def drive(run: str, scenario: str, seeds: list[int], rgb_from: str, contrast_from: str) -> list[float]:
    env = make_env(continuous=True, scenario=scenario)
    if "clean" in (rgb_from, contrast_from):
        env = CleanRendering(env)
    see = DrivingNet.see

    def mixed(net: DrivingNet, x: torch.Tensor) -> torch.Tensor:
        if len(x) != 1:
            return see(net, x)
        given = {"scene": see(net, x)}  # x: the observation, as encode converts it
        if isinstance(env, CleanRendering):  # the clean rendering, converted as encode converts a frame
            given["clean"] = see(net, torch.as_tensor(env.clean).permute(2, 0, 1)[None].float().div(255.0).to(x.device))
        return torch.cat([given[rgb_from][:, :3], given[contrast_from][:, 3:]], dim=1)

    DrivingNet.see = mixed  # type: ignore[method-assign]
    try:
        policy = DrivingPolicy.from_run(run)
        return [run_episode(env, policy, s).episode_return for s in seeds]
    finally:
        DrivingNet.see = see  # type: ignore[method-assign]
        env.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=[s for s in SCENARIOS if s != CLEAN], help="the scene driven")
    parser.add_argument("seeds", type=seeds_arg, help="tracks: 10100,10105 or 10100..10149")
    parser.add_argument("runs", nargs="+", help="run folders (with a contrast input)")
    args = parser.parse_args()
    print("| run | RGB from | contrast from | mean | each track |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        for rgb_from, contrast_from in PAIRINGS:
            returns = drive(run, args.scenario, args.seeds, rgb_from, contrast_from)
            print(f"| {run} | {rgb_from} | {contrast_from} | {np.mean(returns):.1f} | {', '.join(f'{r:.0f}' for r in returns)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
