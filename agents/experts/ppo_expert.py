"""The exported PPO expert at drive time: its files (safetensors + JSON, from `nacdrive expert
train`), where they are found, and the policy behind the expert contract. Separate from
agents.experts.ppo, which trains it with stable-baselines3: driving needs none of the training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers import GrayscaleObservation, ResizeObservation
from safetensors.torch import load_model
from torch import nn

from nac.checkpoint import read_json
from nac.config import ConfigError

SKIP, SIZE, STACK = 2, 64, 2  # the zoo's pipeline: decide every 2nd step on 2 stacked 64x64 grey frames
_PRETRAINED = Path(__file__).parents[1] / "pretrained"
SHIPPED_PPO = {True: _PRETRAINED / "ppo-expert", False: _PRETRAINED / "ppo-expert-discrete"}  # by action space (continuous: True)
PPO_EXPORT = "expert"  # a PPO run exports its expert to <run>/expert/{config.json, policy.safetensors}


def policy_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The policy's JSON kwargs as SB3 takes them (the activation by class)."""
    return {**kwargs, "activation_fn": getattr(nn, kwargs["activation_fn"])}


def find_export(model: str | Path | None, continuous: bool | None = None) -> Path:
    """The folder holding an exported PPO expert: `model` (a PPO run or its export) or, with no
    model, the shipped one of the action space (continuous unless `continuous` is False); checked to
    exist and, when `continuous` is given, to match it."""
    if model is None:
        space = continuous is not False
        model = SHIPPED_PPO[space]
        if not (model / "config.json").is_file():
            raise ConfigError(f"no {'continuous' if space else 'discrete'} PPO expert is shipped: train one with "
                              f"'nacdrive expert train{'' if space else ' --discrete'} --out RUNS/ppo' and pass --model RUNS/ppo")
    d = Path(model)
    if (d / PPO_EXPORT / "config.json").is_file():  # a PPO run folder
        d = d / PPO_EXPORT
    if not (d / "config.json").is_file() or not (d / "policy.safetensors").is_file():
        raise ConfigError(f"{model} holds no exported PPO expert (config.json + policy.safetensors from 'nacdrive expert train')")
    try:
        trained_continuous = bool(read_json(d / "config.json")["continuous"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{d / 'config.json'} is not a PPO expert's config (no 'continuous' entry)") from None
    if continuous is not None and continuous != trained_continuous:
        space = "continuous" if trained_continuous else "discrete"
        raise ConfigError(f"the PPO expert in {d} was trained for {space} actions; {'drop' if trained_continuous else 'add'} --discrete")
    return d


class PPOExpert:
    """The exported PPO policy behind the expert contract, in a plain CarRacing environment: it
    applies PPO's wrappers itself (decides every 2nd step on the last 2 decision frames, 64x64
    grey) and holds its action in between, as FrameSkip did in training."""

    name = "ppo"

    def __init__(self, env: gym.Env, model_dir: str | Path) -> None:
        from stable_baselines3.common.policies import ActorCriticCnnPolicy

        d = find_export(model_dir, bool(env.unwrapped.continuous))
        self.config = read_json(d / "config.json")
        self.env = env
        obs_space = gym.spaces.Box(0, 255, (STACK, SIZE, SIZE), np.uint8)
        self.policy = ActorCriticCnnPolicy(
            obs_space, env.action_space, lambda _: 0.0, use_sde=self.config["use_sde"], **policy_kwargs(self.config["policy_kwargs"])
        )
        load_model(self.policy, str(d / "policy.safetensors"), device="cpu")
        self.policy.set_training_mode(False)
        # the same transforms as training's wrappers (gymnasium's own code, not a copy)
        self._resize = ResizeObservation(env, (SIZE, SIZE))
        self._grey = GrayscaleObservation(self._resize, keep_dim=True)
        self.model_dir = str(d)
        self.reset()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model_dir, "config": self.config}

    def reset(self) -> None:
        self._t = 0
        self._frames: list[np.ndarray] = []
        self._action: Any = None

    def select_action(self, obs: np.ndarray) -> Any:
        if self._t % SKIP == 0:
            grey = self._grey.observation(self._resize.observation(obs))[..., 0]  # (64, 64)
            self._frames = (self._frames or [np.zeros_like(grey)] * (STACK - 1))[-(STACK - 1):] + [grey]
            x = np.stack(self._frames)[None]  # (1, STACK, 64, 64) as VecFrameStack + VecTransposeImage give
            with torch.no_grad():
                action, _ = self.policy.predict(x, deterministic=True)
            self._action = action[0] if self.config["continuous"] else int(action[0])
        self._t += 1
        return self._action
