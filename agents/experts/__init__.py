"""Experts that drive CarRacing: by name, bound to an environment."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from agents.experts.track import TrackExpertConfig, TrackFollowingExpert
from nac.layer import ConfigError

EXPERTS = ("track",)


def make_expert(name: str, env: gym.Env, model: str | Path | None = None) -> TrackFollowingExpert:
    """The expert `name` driving `env` (its action space decides the expert's)."""
    if name == "track":
        if model is not None:
            raise ConfigError("the track expert needs no model file (--model is for --expert ppo)")
        return TrackFollowingExpert(env)
    raise ConfigError(f"unknown expert {name!r}; choose one of {', '.join(EXPERTS)}")


def expert_needs_pixels(name: str) -> bool:
    return name != "track"  # the track expert reads the simulator's state, not the camera
