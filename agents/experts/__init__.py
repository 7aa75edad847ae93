"""Experts that drive CarRacing: by name, bound to an environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.experts.ppo_expert import PPOExpert, find_export
from agents.experts.track import TrackFollowingExpert
from nac.config import ConfigError

EXPERTS = ("track", "ppo")


def check_expert(name: str, model: str | Path | None = None, continuous: bool | None = None) -> Path | None:
    """Everything about an expert choice that can be wrong, checked before any worker starts:
    the name, the model (only PPO takes one; it must hold an exported expert) and, when
    `continuous` is given, that the model was trained for that action space. Returns the PPO
    export folder (None for the track expert)."""
    if name not in EXPERTS:
        raise ConfigError(f"unknown expert {name!r}; choose one of {', '.join(EXPERTS)}")
    if name == "track":
        if model is not None:
            raise ConfigError("the track expert needs no model file (--model is for --expert ppo)")
        return None
    return find_export(model, continuous)


def make_expert(name: str, env: gym.Env, model: str | Path | None = None) -> Any:
    """The expert `name` driving `env` (its action space decides the expert's)."""
    model_dir = check_expert(name, model, bool(env.unwrapped.continuous))
    if model_dir is None:
        return TrackFollowingExpert(env)
    return PPOExpert(env, model_dir)


def expert_needs_pixels(name: str) -> bool:
    return name != "track"  # the track expert reads the simulator's state, not the camera
