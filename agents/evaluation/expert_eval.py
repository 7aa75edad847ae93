"""`nacdrive expert eval`: an expert's closed-loop returns over fixed seeds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from agents.carracing import scenarios
from agents.carracing.env import CONTINUOUS, make_env
from agents.experts import EXPERTS, check_expert, expert_needs_pixels, make_expert
from agents.driving.rollout import EpisodeResult, Rollouts, parallel_map, run_episode, shares, summarize
from nac.config import ConfigError, at_least, check_ranges


@dataclass(kw_only=True)
class ExpertEvalConfig(Rollouts):
    expert: str = field(default="track", metadata={"choices": EXPERTS})  # which expert drives
    continuous: bool = field(default=True, metadata=CONTINUOUS)  # continuous actions (steer, gas, brake), as the shipped policies
    episodes: int = field(default=50, metadata=at_least(1))  # episodes, on seeds seed_start, seed_start + 1, ...
    seed_start: int = 0  # the first seed
    model: str | None = None  # the PPO expert: a run folder from 'expert train' or its expert/ folder (default: the shipped one)
    scenario: str = scenarios.CLEAN  # agents.carracing.scenarios: the track expert reads the car's state, so only domain-randomize (its
    # own tracks) changes what it drives; the PPO expert sees the frames

    def __post_init__(self) -> None:
        check_ranges(self)
        super().__post_init__()
        check_expert(self.expert, self.model, self.continuous)  # name, model file, action space: before any worker starts
        scenarios.check_scenario(self.scenario)
        if self.episodes < 1:
            raise ConfigError(f"episodes must be >= 1 (got {self.episodes})")
        if self.seed_start < 0:
            raise ConfigError(f"seed-start must be >= 0 (got {self.seed_start})")


def _one(cfg: ExpertEvalConfig, seed: int) -> EpisodeResult:
    env = make_env(cfg.continuous, cfg.max_steps, pixels=expert_needs_pixels(cfg.expert), scenario=cfg.scenario)
    try:
        return run_episode(env, make_expert(cfg.expert, env, cfg.model), seed)
    finally:
        env.close()


def evaluate_expert(cfg: ExpertEvalConfig) -> dict[str, Any]:
    seeds = list(range(cfg.seed_start, cfg.seed_start + cfg.episodes))
    results = parallel_map(
        partial(_one, cfg),
        seeds,
        cfg.executor(),
        desc=f"{cfg.expert} expert",
        postfix=lambda done: {"mean": f"{sum(r.episode_return for r in done) / len(done):.1f}"},
    )
    results.sort(key=lambda r: r.seed)
    return {
        "expert": cfg.expert,
        "action_space": "continuous" if cfg.continuous else "discrete",
        "config": asdict(cfg),
        **summarize(r.episode_return for r in results),
        **shares(results),
        "seeds": [r.seed for r in results],
        "returns": [r.episode_return for r in results],
        "episodes_detail": [r.to_dict() for r in results],
    }
