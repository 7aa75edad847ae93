"""Experts that drive CarRacing: by name, bound to an environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.experts.track import TrackExpertConfig, TrackFollowingExpert
from nac.layer import ConfigError

EXPERTS = ("track", "ppo")
SHIPPED_PPO = Path(__file__).parents[1] / "pretrained" / "ppo-expert"  # the trained PPO expert, when shipped


def make_expert(name: str, env: gym.Env, model: str | Path | None = None) -> Any:
    """The expert `name` driving `env` (its action space decides the expert's)."""
    if name == "track":
        if model is not None:
            raise ConfigError("the track expert needs no model file (--model is for --expert ppo)")
        return TrackFollowingExpert(env)
    if name == "ppo":
        from agents.experts.ppo import PPOExpert

        if model is None:
            if not (SHIPPED_PPO / "config.json").is_file():
                raise ConfigError("no PPO expert is shipped yet: train one with 'nacdrive expert train --out RUNS/ppo' and pass --model RUNS/ppo")
            model = SHIPPED_PPO
        return PPOExpert(env, model)
    raise ConfigError(f"unknown expert {name!r}; choose one of {', '.join(EXPERTS)}")


def expert_needs_pixels(name: str) -> bool:
    return name != "track"  # the track expert reads the simulator's state, not the camera
