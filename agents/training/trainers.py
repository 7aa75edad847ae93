"""The trainers by task name, and `train`: the one entry point that runs a TrainConfig.

A task (`TrainConfig.task`: carracing or udacity, agents.training.loop.TASKS) names what is learned; its
trainer builds the data and network (a Trainable) and hands them to the shared loop
(`agents.training.loop.fit`); the loop imports no trainer, so dependencies run one way:
trainers -> bc / udacity -> loop.
"""

from __future__ import annotations

from typing import Any, Callable

from agents.training.bc import train_carracing
from agents.training.distributed import finish_distributed
from agents.training.loop import TrainConfig
from agents.training.udacity import train_udacity

Trainer = Callable[[TrainConfig, bool, bool, bool], dict[str, Any]]

TRAINERS: dict[str, Trainer] = {"carracing": train_carracing, "udacity": train_udacity}


def train(cfg: TrainConfig, resume: bool = False, quiet: bool = False, restart_best: bool = False) -> dict[str, Any]:
    """Train (or resume) a run of cfg.task; returns its metrics. restart_best: on resume, "best"
    is chosen among the checkpoints from here on (DAgger rounds). Under torchrun it is the process's whole training:
    its process group ends here."""
    metrics = TRAINERS[cfg.task](cfg, resume, quiet, restart_best)
    finish_distributed()
    return metrics
