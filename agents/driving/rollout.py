"""Episodes in CarRacing, their statistics, and running many of them on the executor."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Protocol

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from agents.carracing.env import EPISODE_STEPS
from agents.carracing.measures import skipped_tiles, wheels_off_road
from agents.driving.executor import STORAGE_WAIT, ExecutorConfig, WorkItem, make_executor
from nac.config import ConfigDict, above, at_least, check_ranges

SOLVED = 900.0  # CarRacing counts an average of 900 as solved


class Policy(Protocol):
    """The one policy contract: reset() at an episode's start, select_action(obs) in the loop."""

    def reset(self) -> None: ...

    def select_action(self, obs: Any) -> Any: ...


@dataclass
class Rollouts(ConfigDict):
    """How a job's episodes are driven: their length and where they run. Every job that drives episodes is one (collect,
    dagger, evaluate, expert eval, study), so these options are declared here once; which tracks and how many stay each
    job's own, since they mean something different in each (demonstrations to record, rollouts per round, held-out tracks)."""

    max_steps: int = field(default=EPISODE_STEPS, metadata=at_least(1))  # steps per episode (CarRacing's limit is 1000)
    workers: int = 0  # local processes; 0: up to 2, 1: in this process
    ray: str | None = field(default=None, metadata={"const": "local", "metavar": "ADDRESS"})  # run the episodes as Ray tasks on the cluster at this
    # address (auto, ray://head:10001), or given without an address on a new local Ray instance; needs pip install
    # 'nac-drive[cluster]' (default: local processes, see --workers)
    storage_wait: float = field(default=STORAGE_WAIT, metadata=above(0))  # with --ray: seconds to wait for a live node's answer
    # to the check that it sees the job's folders (a busy node, or one still starting its workers, answers late; a node
    # that dies or sees another folder is refused at once)

    def __post_init__(self) -> None:
        check_ranges(self)

    def executor(self, shared: tuple[str, ...] = ()) -> ExecutorConfig:
        """Where the episodes run; `shared`: the folders they read and write (on Ray, every node must see them)."""
        return ExecutorConfig(self.workers, self.ray, shared=shared, storage_wait=self.storage_wait)


@dataclass
class EpisodeResult:
    seed: int
    episode_return: float
    length: int
    lap_finished: bool
    tiles_visited: float  # share of the track's tiles visited
    tiles_skipped: int = 0  # tiles driven past without touching them (agents.carracing.measures.skipped_tiles): one costs the lap
    wheels_off: float = 0.0  # share of steps with a wheel off the road (touching no tile)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Observer(Protocol):
    """Watches an episode: before_step sees the frame and the action chosen on it (the
    environment still in that frame's state), after_step the outcome: the next frame, reward,
    flags and info."""

    def before_step(self, env: gym.Env, obs: Any, action: Any) -> None: ...

    def after_step(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> None: ...


def run_episode(env: gym.Env, policy: Policy, seed: int, observer: Observer | None = None) -> EpisodeResult:
    """One full episode on `seed`."""
    obs, _ = env.reset(seed=seed)
    policy.reset()
    total, steps, finished, off = 0.0, 0, False, 0
    while True:
        off += wheels_off_road(env) > 0
        action = policy.select_action(obs)
        if observer is not None:
            observer.before_step(env, obs, action)
        obs, reward, terminated, truncated, info = env.step(action)
        if observer is not None:
            observer.after_step(obs, float(reward), terminated, truncated, info)
        total += float(reward)
        steps += 1
        finished = finished or bool(info.get("lap_finished", False))
        if terminated or truncated:
            break
    return _result(env, seed, total, steps, finished, off)


def _result(env: gym.Env, seed: int, total: float, steps: int, finished: bool, off: int) -> EpisodeResult:
    """An ended episode's result: its sums, and the tiles as the environment holds them."""
    u = env.unwrapped
    return EpisodeResult(seed, total, steps, finished, u.tile_visited_count / max(1, len(u.track)), skipped_tiles(env), off / steps)


class BatchPolicy(Protocol):
    """A policy that drives several episodes together: reset_batch(seeds), then select_actions(frames (B, ...))."""

    def reset_batch(self, seeds: list[int]) -> None: ...

    def select_actions(self, frames: np.ndarray) -> list[Any]: ...


def run_episodes(envs: list[gym.Env], policy: BatchPolicy, seeds: list[int], observers: list[Observer] | None = None) -> list[EpisodeResult]:
    """Full episodes on `seeds`, one environment each, stepped together: one select_actions call
    (one batched forward) a step for all of them. An episode that has ended is stepped no more; its
    last frame stands in for it until all have ended. Each episode is the one run_episode drives
    alone with the same policy (tests/agents/driving/test_rollout.py), observers[i] seeing episode i's steps."""
    if len(envs) != len(seeds) or (observers is not None and len(observers) != len(seeds)):
        raise ValueError(f"run_episodes: {len(envs)} environments for {len(seeds)} seeds")
    obs = [env.reset(seed=seed)[0] for env, seed in zip(envs, seeds)]
    policy.reset_batch(seeds)
    n = len(envs)
    total, steps, finished, off = [0.0] * n, [0] * n, [False] * n, [0] * n
    running = [True] * n
    while any(running):
        for i in range(n):
            if running[i]:
                off[i] += wheels_off_road(envs[i]) > 0
        actions = policy.select_actions(np.stack(obs))
        for i, env in enumerate(envs):
            if not running[i]:
                continue
            if observers is not None:
                observers[i].before_step(env, obs[i], actions[i])
            obs[i], reward, terminated, truncated, info = env.step(actions[i])
            if observers is not None:
                observers[i].after_step(obs[i], float(reward), terminated, truncated, info)
            total[i] += float(reward)
            steps[i] += 1
            finished[i] = finished[i] or bool(info.get("lap_finished", False))
            running[i] = not (terminated or truncated)
    return [_result(env, seeds[i], total[i], steps[i], finished[i], off[i]) for i, env in enumerate(envs)]


def lost_to_skip(lap_finished: bool, tiles_skipped: int) -> bool:
    """An episode whose lap was lost to a skipped tile (it may have reached every other one)."""
    return not lap_finished and tiles_skipped > 0


def shares(results: list[EpisodeResult]) -> dict[str, float]:
    """Over episodes: laps finished, tiles visited, laps lost to a skipped tile, steps with a wheel
    off the road (each a share; 0 with no episodes)."""
    def mean(values: Iterable[float]) -> float:
        return float(np.mean(list(values))) if results else 0.0

    return {
        "finished_share": mean(r.lap_finished for r in results),
        "tiles_share": mean(r.tiles_visited for r in results),
        "skipped_share": mean(lost_to_skip(r.lap_finished, r.tiles_skipped) for r in results),
        "wheels_off_share": mean(r.wheels_off for r in results),
    }


def summarize(returns: Iterable[float]) -> dict[str, float]:
    """Mean, std, min, max, a 95 % confidence interval of the mean (t-distribution), solved share."""
    r = np.asarray(list(returns), dtype=np.float64)
    n = len(r)
    if n == 0:
        return {"episodes": 0}
    std = float(r.std(ddof=1)) if n > 1 else 0.0
    half = _t95(n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return {
        "episodes": n,
        "mean_return": float(r.mean()),
        "std_return": std,
        "min_return": float(r.min()),
        "max_return": float(r.max()),
        "ci95_low": float(r.mean() - half),
        "ci95_high": float(r.mean() + half),
        "solved_share": float((r >= SOLVED).mean()),
    }


# Two-sided 95 % Student-t quantiles for 1..30 degrees of freedom (a table rather than a
# scipy dependency for one number); beyond 30, 1.96 + 2.4 / dof is within 0.003.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t95(dof: int) -> float:
    return _T975[dof - 1] if dof <= len(_T975) else 1.96 + 2.4 / dof


def parallel_map(
    fn: Callable[[Any], Any],
    items: list[Any],
    where: ExecutorConfig | int,
    desc: str,
    postfix: Callable[[list[Any]], dict] | None = None,
    on_result: Callable[[Any], None] | None = None,
    counts: list[int] | None = None,
) -> list[Any]:
    """fn over items on the executor `where` names (a worker count: local processes, 1 = this
    process), with a progress bar; on_result(result) runs in this process as each one finishes.
    counts: how many episodes each item is (the bar counts episodes; default one each).
    Results come back in completion order. On Ctrl-C or a failure, the results finished so far
    are attached to the exception as `.partial`."""
    cfg = where if isinstance(where, ExecutorConfig) else ExecutorConfig(workers=where)
    done: list[Any] = []
    ex = make_executor(cfg, len(items))  # before the bar: a cluster that cannot be reached fails here
    counts = counts or [1] * len(items)
    bar = tqdm(total=sum(counts), desc=desc, unit="ep", dynamic_ncols=True)
    try:
        with ex:
            for i, item in enumerate(items):
                ex.submit(WorkItem(i, fn, item))
            for i, result in ex.results():
                done.append(result)
                if on_result is not None:
                    on_result(result)
                bar.update(counts[i])
                if postfix:
                    bar.set_postfix(postfix(done))
    except BaseException as exc:
        exc.partial = done  # type: ignore[attr-defined]
        raise
    finally:
        bar.close()
    return done
