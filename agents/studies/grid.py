"""A study's grid and how its runs are evaluated (saved in study.json): heads x variants x training
seeds, held-out tracks, levels."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.carracing import perturb
from agents.carracing import scenarios
from agents.carracing.env import CONTINUOUS
from agents.carracing.seeds import VALIDATION_SEED
from agents.driving.executor import storage_path
from agents.driving.rollout import Rollouts
from agents.experts import EXPERTS, check_expert
from agents.training.recipe import UDACITY_FIELDS, Recipe
from agents.training.bc import net_config
from agents.training.collect import DemosRecipe
from agents.training.loop import TASKS
from agents.training.dagger_config import FIRST_SEED
from agents.training.udacity import TURN_SLOWDOWN
from nac.config import ConfigError, at_least, between, check_ranges, need
from nac.heads import HEADS
from nac.pilotnet import DENSE

CLEAN = perturb.CLEAN


@dataclass(kw_only=True)
class StudyConfig(Rollouts):
    """A study's grid and how its runs are trained and evaluated (saved in study.json); its workers each train one run or
    drive one episode at a time."""

    out: str  # the study folder (demos/, runs/, study.json, report/)
    task: str = field(default="carracing", metadata={"choices": TASKS})  # carracing: the driving network in CarRacing; udacity:
    # PilotNet runs on one stand-in recording ('sim --record'), each episode driven by the stand-in simulator through a bridge of
    # its own, as 'drive' + 'sim' do (recipe keys: epochs, lr, batch_size, val_fraction, net.*; heads include dense)
    heads: list[str] = field(default_factory=lambda: ["nac", "lstm"], metadata={"choices": lambda: [*HEADS, DENSE]})  # sequence
    # heads (nac.heads; udacity also dense, PilotNet's own layers)
    seeds: int = field(default=3, metadata=at_least(1))  # training seeds per head and variant: first_seed .. first_seed + seeds - 1
    first_seed: int = 0  # the first training seed
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"base": {}})  # name -> overrides of the full recipe
    demos: int = field(default=50, metadata=at_least(2))  # expert demonstrations (seeds 0 .. demos - 1), recorded once and shared
    continuous: bool = field(default=True, metadata=CONTINUOUS)  # continuous actions
    expert: str = field(default="track", metadata={"choices": EXPERTS})  # who demonstrates and labels DAgger rollouts: track, the
    # privileged track follower, or ppo, the shipped PPO expert
    episodes: int = field(default=50, metadata=at_least(1))  # held-out episodes per run at the clean level
    perturb_episodes: int | None = field(default=None, metadata=at_least(1))  # held-out episodes per run at each perturbation level: the first ones of the clean
    # level's seeds (default: episodes)
    seed_start: int = VALIDATION_SEED  # the first held-out seed: the validation tracks by default; the test tracks
    # (agents.carracing.seeds.TEST_SEED on) for a result to report, driven once at the end
    levels: list[str] = field(default_factory=lambda: [CLEAN])  # conditions: "none" (clean), a scenario (agents.carracing.scenarios), a
    # perturbation (agents.carracing.perturb) or SCENARIO+PERTURBATION (agents.carracing.perturb.parse_level)
    speed: float | None = field(default=None, metadata=between(0, 40, lo_open=True))  # udacity: the bridge's target speed in mph (drive --speed; default: the speed a run predicts,
    # net.speed_output=true, else 20)
    turn_slowdown: float = field(default=TURN_SLOWDOWN, metadata=between(0, 1, hi_open=True))  # udacity, with speed: the target drops by this share at full steering lock (drive --turn-slowdown)

    def __post_init__(self) -> None:
        check_ranges(self)
        super().__post_init__()
        self.out = storage_path(self.out, self.ray)
        need(self.task in TASKS, f"task must be one of {', '.join(TASKS)} (got {self.task!r})")
        check_expert(self.expert, None, self.continuous)  # the name, and for ppo the shipped model's action space
        need(bool(self.heads), "give at least one head")
        allowed = [*HEADS, DENSE] if self.task == "udacity" else list(HEADS)
        unknown = [h for h in self.heads if h not in allowed]
        need(not unknown, f"unknown heads {unknown}; choose from {', '.join(allowed)}")
        if self.task == "udacity":
            need(self.continuous and self.expert == "track", "udacity studies record the continuous track expert (no --discrete)")
            need(self.levels == [CLEAN], "udacity studies drive clean through the bridge (no --perturb)")
            for name, overrides in self.variants.items():
                extra = sorted(set(overrides) - UDACITY_FIELDS)
                need(not extra, f"variant {name!r}: {', '.join(extra)} not a recipe field of PilotNet runs (udacity: {', '.join(sorted(UDACITY_FIELDS))})")
        need(len(set(self.heads)) == len(self.heads), "a head is given twice")
        need(bool(self.variants), "give at least one variant")
        for name, overrides in self.variants.items():
            recipe = Recipe.from_dict(overrides)
            need(self.continuous or not recipe.demos.noise, f"variant {name!r}: noise (DART) drifts the steering of continuous actions; drop --discrete or the noise")
            if self.task == "carracing":  # its network for every head, checked now rather than in a training worker
                for h in self.heads:
                    try:
                        net_config(recipe.train_config("<demos>", "<run>", head=h, seed=0, continuous=self.continuous), "continuous" if self.continuous else "discrete")
                    except ConfigError as e:
                        raise ConfigError(f"variant {name!r} with head {h}: {e}") from None
        need(self.perturb_episodes is None or 1 <= self.perturb_episodes <= self.episodes,
             f"perturb-episodes must be in 1..episodes ({self.episodes}; got {self.perturb_episodes})")
        need(self.seed_start >= self.demos, f"seed-start must be >= {self.demos}: the held-out seeds may not be demonstration seeds")
        need(self.seed_start + self.episodes <= FIRST_SEED, f"held-out seeds must stay below {FIRST_SEED} (DAgger's rollout seeds)")
        need(bool(self.levels), "give at least one level")
        for level in self.levels:
            perturb.parse_level(level)
        need(len(set(self.levels)) == len(self.levels), "a level is given twice")

    def runs(self) -> list[dict[str, Any]]:
        """Every run of the grid, seed-major: the first seed of every head comes first, so that
        an interrupted study has comparable runs of every head rather than all runs of one."""
        return [
            {"key": f"{v}/{h}/seed{s}", "variant": v, "head": h, "seed": s}
            for s in range(self.first_seed, self.first_seed + self.seeds)
            for v in self.variants
            for h in self.heads
        ]

    def eval_seeds(self, level: str = CLEAN) -> list[int]:
        n = self.episodes if perturb.parse_level(level).perturbation is None or self.perturb_episodes is None else self.perturb_episodes
        return list(range(self.seed_start, self.seed_start + n))

    def demos_dir(self, recipe: DemosRecipe | None = None) -> Path:
        """The demonstrations of runs whose recipe records them this way: one set per steering noise (DART) and scene."""
        recipe = recipe or DemosRecipe()
        parts = ([f"noise{recipe.noise:g}"] if recipe.noise else []) + ([f"scene-{recipe.scene}"] if recipe.scene != scenarios.CLEAN else [])
        return Path(self.out) / "-".join(["demos", *parts])

    def run_dir(self, key: str) -> Path:
        return Path(self.out) / "runs" / key
