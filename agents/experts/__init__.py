"""Experts that drive CarRacing: by name, bound to an environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.experts.track import TrackFollowingExpert
from nac.layer import ConfigError

EXPERTS = ("track", "ppo")
SHIPPED_PPO = Path(__file__).parents[1] / "pretrained" / "ppo-expert"  # the trained PPO expert, when shipped
PPO_EXPORT = "expert"  # a PPO run exports its expert to <run>/expert/{config.json, policy.safetensors}


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
    if model is None:
        if not (SHIPPED_PPO / "config.json").is_file():
            raise ConfigError("no PPO expert is shipped yet: train one with 'nacdrive expert train --out RUNS/ppo' and pass --model RUNS/ppo")
        model = SHIPPED_PPO
    d = Path(model)
    if (d / PPO_EXPORT / "config.json").is_file():  # a PPO run folder
        d = d / PPO_EXPORT
    if not (d / "config.json").is_file() or not (d / "policy.safetensors").is_file():
        raise ConfigError(f"{model} holds no exported PPO expert (config.json + policy.safetensors from 'nacdrive expert train')")
    try:
        trained_continuous = bool(json.loads((d / "config.json").read_text())["continuous"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{d / 'config.json'} is not a PPO expert's config (no 'continuous' entry)") from None
    if continuous is not None and continuous != trained_continuous:
        space = "continuous" if trained_continuous else "discrete"
        raise ConfigError(f"the PPO expert in {d} was trained for {space} actions; {'add' if trained_continuous else 'drop'} --continuous")
    return d


def make_expert(name: str, env: gym.Env, model: str | Path | None = None) -> Any:
    """The expert `name` driving `env` (its action space decides the expert's)."""
    model_dir = check_expert(name, model, bool(env.unwrapped.continuous))
    if model_dir is None:
        return TrackFollowingExpert(env)
    from agents.experts.ppo import PPOExpert

    return PPOExpert(env, model_dir)


def expert_needs_pixels(name: str) -> bool:
    return name != "track"  # the track expert reads the simulator's state, not the camera
