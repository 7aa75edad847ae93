"""`nacdrive collect`: record expert demonstrations in CarRacing, resumable and lossless."""

from __future__ import annotations

import errno
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from agents.carracing.env import ACTIONS, CONTINUOUS, EPISODE_STEPS, FAST_ID, FPS, RENDERER, make_env
from agents.carracing.scenarios import CLEAN, check_scenario
from agents.carracing.state import STATE_FIELDS, car_state
from agents.experts import EXPERTS, check_expert, make_expert
from agents.driving.executor import storage_path
from agents.driving.rollout import EpisodeResult, Rollouts, parallel_map, run_episode
from datasets.demos import DataError, DemoSet, Episode, write_episode
from nac.checkpoint import holds_anything
from nac.config import ConfigDict, ConfigError, at_least, between, check_ranges, need


@dataclass
class DemosRecipe(ConfigDict):
    """How the demonstrations are recorded: the recipe's part of a collection (agents.training.recipe.Recipe holds one;
    CollectConfig is one, with the folder, the expert and the episodes)."""

    WHAT = "demonstration fields"

    noise: float = field(default=0.0, metadata=between(0, 1))  # continuous: the car executes the expert's steering plus a slowly varying offset of this std, the
    # recorded action stays the expert's, so the demonstrations show recoveries (DART)
    scene: str = CLEAN  # what the frames show while the expert drives (agents.carracing.scenarios.SCENARIOS; it reads the car's
    # state and drives any): domain-randomize trains under gymnasium's randomised colours. A run's DAgger rollouts drive the
    # scene of its demonstrations

    def __post_init__(self) -> None:
        check_ranges(self)
        check_scenario(self.scene)


@dataclass(kw_only=True)
class CollectConfig(DemosRecipe, Rollouts):
    """Recording demonstrations (`nacdrive collect`): a demonstration recipe (DemosRecipe's fields) driven by this expert into
    this folder, its episodes driven as Rollouts says."""

    out: str  # the demonstration folder; an existing one that is not empty is refused unless resume or append
    expert: str = field(default="track", metadata={"choices": EXPERTS})  # which expert drives: track, the privileged track
    # follower (with discrete actions it plans 40 steps ahead before each action), or ppo, the shipped PPO expert
    episodes: int = field(default=20, metadata=at_least(1))  # episodes to record (with resume: the set's planned total is kept)
    continuous: bool = field(default=True, metadata=CONTINUOUS)  # continuous actions (steer, gas, brake), as the shipped policies
    seed_start: int | None = None  # first seed (default 0, or after the set's last with append)
    resume: bool = False  # complete an interrupted collection into `out`
    append: bool = False  # add `episodes` more episodes to an existing set
    model: str | None = None  # the PPO expert's run folder (default: the shipped one)

    def __post_init__(self) -> None:
        check_ranges(self)
        DemosRecipe.__post_init__(self)
        Rollouts.__post_init__(self)
        self.out = storage_path(self.out, self.ray)
        check_expert(self.expert, self.model, self.continuous)  # name, model file, action space: before any worker starts
        if self.episodes < 1:
            raise ConfigError(f"episodes must be >= 1 (got {self.episodes})")
        if self.resume and self.append:
            raise ConfigError("choose --resume (complete an interrupted run) or --append (add episodes), not both")
        if self.seed_start is not None and self.seed_start < 0:
            raise ConfigError(f"seed-start must be >= 0 (got {self.seed_start})")
        need(not self.noise or self.continuous, f"noise is for continuous actions (drop --discrete; got {self.noise})")


class SteeringDrift:
    """DART's disturbance (Laskey et al. 2017, "DART: Noise Injection for Robust Imitation
    Learning"): an AR(1) offset of std `std` added to the steering the car executes, lasting about
    1 / (1 - PERSISTENCE) steps, so the car drifts off the expert's line and the expert's labels
    show how to come back. Seeded; reset per episode."""

    PERSISTENCE = 0.95

    def __init__(self, std: float, seed: int) -> None:
        self.std, self.rng, self.offset = std, np.random.default_rng(seed), 0.0

    def reset(self) -> None:
        self.offset = 0.0

    def __call__(self, action: np.ndarray) -> np.ndarray:
        p = self.PERSISTENCE
        self.offset = p * self.offset + self.std * np.sqrt(1 - p * p) * self.rng.standard_normal()
        executed = np.array(action, dtype=np.float32, copy=True)
        executed[0] = np.clip(executed[0] + self.offset, -1.0, 1.0)
        return executed


class DriftedExpert:
    """The expert driving with a SteeringDrift: select_action returns the executed action; `label`
    is what the expert chose (the recorded action)."""

    def __init__(self, expert: Any, drift: SteeringDrift) -> None:
        self.expert, self.drift, self.label = expert, drift, None

    def reset(self) -> None:
        self.expert.reset()
        self.drift.reset()

    def select_action(self, obs: Any) -> np.ndarray:
        self.label = self.expert.select_action(obs)
        return self.drift(self.label)


class Recorder:
    """Observer that keeps everything an episode file holds. The recorded action is the one
    executed, or `label()` when given (DAgger: the expert's label of a frame the policy drove);
    the state row is the car's, then the `expert`'s planned wheel angle and speed excess (NaN if it has
    none), then `saw()`: whether the driving policy saw the frame when it came (NaN: no policy drove)."""

    def __init__(self, label: Callable[[], Any] | None = None, expert: Any = None, saw: Callable[[], bool] | None = None) -> None:
        self.label, self.expert, self.saw = label, expert, saw
        self.frames: list[np.ndarray] = []
        self.actions: list[Any] = []
        self.state: list[np.ndarray] = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.final_frame: np.ndarray | None = None  # the frame after the last step

    def before_step(self, env: gym.Env, obs: np.ndarray, action: Any) -> None:
        self.frames.append(np.asarray(obs, dtype=np.uint8))
        self.actions.append(action if self.label is None else self.label())
        extra = [getattr(self.expert, name, np.nan) for name in ("planned_wheel_angle", "speed_excess")]
        extra.append(np.nan if self.saw is None else float(self.saw()))
        self.state.append(np.append(car_state(env).as_array(), np.asarray(extra, dtype=np.float32)))

    def after_step(self, obs: np.ndarray, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        self.final_frame = np.asarray(obs, dtype=np.uint8)
        self.rewards.append(reward)
        self.terminated.append(terminated)
        self.truncated.append(truncated)

    def episode(self, seed: int, continuous: bool) -> Episode:
        n = len(self.frames)
        return Episode(
            seed=seed,
            frames=np.stack(self.frames),
            actions=np.asarray(self.actions, dtype=np.float32 if continuous else np.int64),
            rewards=np.asarray(self.rewards, dtype=np.float32),
            terminated=np.asarray(self.terminated, dtype=bool),
            truncated=np.asarray(self.truncated, dtype=bool),
            timestamps=np.arange(n, dtype=np.float64) / FPS,
            state=np.stack(self.state),
            final_frame=self.final_frame,
        )


def record_episode(cfg: CollectConfig, seed: int) -> dict[str, Any]:
    """Drive one episode with the expert and write it; returns its manifest entry."""
    env = make_env(cfg.continuous, cfg.max_steps, scenario=cfg.scene)
    try:
        expert: Any = make_expert(cfg.expert, env, cfg.model)
        driver: Any = expert
        rec = Recorder(expert=expert)
        if cfg.noise:
            driver = DriftedExpert(expert, SteeringDrift(cfg.noise, seed))
            rec = Recorder(label=lambda: driver.label, expert=expert)
        result = run_episode(env, driver, seed, observer=rec)
        return save_recording(cfg.out, rec.episode(seed, cfg.continuous), result)
    finally:
        env.close()


def save_recording(out: str, episode: Episode, result: EpisodeResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a recorded episode into a demonstration folder; its manifest entry."""
    try:
        return write_episode(out, episode, {"tiles_visited": result.tiles_visited, **(extra or {})})
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DataError(f"disk full while writing the episode of seed {episode.seed} into {out}") from None
        raise


def demo_header(expert_name: str, continuous: bool, max_steps: int = EPISODE_STEPS, model: str | None = None,
                scene: str = CLEAN) -> dict[str, Any]:
    """The manifest header of a demonstration set recorded in CarRacing."""
    env = make_env(continuous, max_steps, pixels=False)
    expert = make_expert(expert_name, env, model)
    env.close()
    return {
        # the frames are FastCarRacing's (CarRacing-v3 drawn by its renderer): gym.make(env_id, **env_kwargs) remakes them
        "env_id": FAST_ID,
        "env_kwargs": {"continuous": continuous, "max_episode_steps": max_steps, "renderer": RENDERER, "scenario": scene},
        "action_space": "continuous" if continuous else "discrete",
        "action_names": ["steer", "gas", "brake"] if continuous else list(ACTIONS),
        "frame_rate": FPS,
        "state_fields": list(STATE_FIELDS),
        "expert": expert.describe(),
    }


def recorded_scene(demos: DemoSet) -> str:
    """The scene a demonstration set was recorded in (clean for a set from before scenes were recorded)."""
    return demos.manifest.get("env_kwargs", {}).get("scenario", CLEAN)


def training_scene(folders: list[str]) -> str:
    """The one scene of a run's demonstration folders, where its DAgger rollouts drive."""
    scenes = {recorded_scene(DemoSet(f)) for f in folders}
    if len(scenes) != 1:
        raise ConfigError(f"the run's demonstrations were recorded in several scenes ({', '.join(sorted(scenes))}); DAgger drives one")
    return scenes.pop()


def _prepare(cfg: CollectConfig) -> tuple[DemoSet, list[int]]:
    """The set to write into and the seeds still to record; refuses to overwrite anything."""
    out = Path(cfg.out)
    exists = holds_anything(out)
    if exists and not (cfg.resume or cfg.append):
        raise ConfigError(
            f"{out} is not empty; use --resume to complete an interrupted collection there, "
            "--append to add episodes, or another --out"
        )
    if not exists:
        if cfg.resume or cfg.append:
            raise ConfigError(f"nothing to {'resume' if cfg.resume else 'append to'} in {out}: it holds no demonstration set")
        start = cfg.seed_start or 0
        header = demo_header(cfg.expert, cfg.continuous, cfg.max_steps, cfg.model, cfg.scene)
        if cfg.noise:
            header["steering_noise"] = {"std": cfg.noise, "persistence": SteeringDrift.PERSISTENCE}  # DART
        demos = DemoSet.create(out, {**header, "planned_seeds": list(range(start, start + cfg.episodes))})
        return demos, demos.manifest["planned_seeds"]

    demos = DemoSet(out)
    want = "continuous" if cfg.continuous else "discrete"
    if demos.manifest["action_space"] != want:
        raise ConfigError(
            f"{out} is a {demos.manifest['action_space']} data set; a {want} expert cannot record into it "
            f"({'add' if cfg.continuous else 'drop'} --discrete)"
        )
    recorded_noise = demos.manifest.get("steering_noise", {}).get("std", 0.0)
    if recorded_noise != cfg.noise:
        raise ConfigError(f"{out} was recorded with steering noise {recorded_noise}, not {cfg.noise}")
    if recorded_scene(demos) != cfg.scene:
        raise ConfigError(f"{out} was recorded in the scene {recorded_scene(demos)}, not {cfg.scene}")
    if demos.manifest["expert"]["name"] != cfg.expert:
        raise ConfigError(f"{out} was recorded by the {demos.manifest['expert']['name']} expert, not {cfg.expert}")
    demos.recover()
    if cfg.append:
        planned = demos.manifest["planned_seeds"]
        start = cfg.seed_start if cfg.seed_start is not None else max(planned) + 1
        new = list(range(start, start + cfg.episodes))
        clash = sorted(set(new) & set(planned))
        if clash:
            raise ConfigError(f"seeds {clash[:5]} are already planned in {out}; choose --seed-start >= {max(planned) + 1}")
        demos.manifest["planned_seeds"] = planned + new
        demos.save()
    done = set(demos.seeds())
    return demos, [s for s in demos.manifest["planned_seeds"] if s not in done]


def collect(cfg: CollectConfig) -> dict[str, Any]:
    """Record the missing episodes; returns the set's info. Progress shows episodes, frames and
    the mean return so far."""
    demos, todo = _prepare(cfg)
    if todo:
        try:
            parallel_map(
                partial(record_episode, cfg),
                todo,
                cfg.executor(shared=(cfg.out,)),
                desc=f"recording {cfg.expert}",
                on_result=demos.add,
                postfix=lambda done: {
                    "frames": sum(e["length"] for e in done),
                    "mean return": f"{np.mean([e['return'] for e in done]):.1f}",
                },
            )
        except BrokenProcessPool:
            raise DataError(
                f"a worker process died; the {len(demos.episodes)} episodes written stay valid. "
                f"Run again with --resume to record the rest"
            ) from None
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"{len(demos.episodes)} of {len(demos.manifest['planned_seeds'])} episodes written; --resume completes") from None
    return demos.info()
