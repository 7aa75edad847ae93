"""Behaviour cloning's closed-loop selection: the mean return a network's weights drive over the selection seeds, split
across the processes of a torchrun run."""

from __future__ import annotations

import torch

from agents.carracing.env import make_env
from agents.driving.policy import DrivingPolicy
from agents.driving.rollout import run_episode
from agents.training.distributed import Dist, summed
from nac.driving import DrivingNet


def closed_loop_return(net: DrivingNet, seeds: list[int], max_steps: int, share: Dist = Dist(),
                       device: torch.device | None = None) -> float:
    """Mean return of the network driving CarRacing on these seeds (one environment at a time: a few episodes per
    validation need no worker pool); under torchrun each process drives every world-th seed and the returns are
    added up (device: where the processes add them)."""
    was_training = net.training
    policy = DrivingPolicy(net)  # puts the net in eval mode
    total = 0.0
    for seed in seeds[share.rank :: share.world]:
        policy.reset(seed)
        env = make_env(net.config.action_space == "continuous", max_steps)
        try:
            total += run_episode(env, policy, seed).episode_return
        finally:
            env.close()
    net.train(was_training)
    return summed(share, [total], device or torch.device("cpu"))[0] / len(seeds)
