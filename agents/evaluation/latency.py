"""Per-step latency of driving policies on one CPU thread (`nacdrive bench policy`) and of the
simulator's step with gymnasium's renderer against ours (`nacdrive bench env`); training's throughput
is agents.training.throughput's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from gymnasium.envs.box2d.car_racing import CarRacing

from agents.carracing.env import ENV_ID, make_env
from agents.carracing.render import DirectRenderer
from agents.experts import make_expert
from agents.driving.policy import DrivingPolicy
from nac.driving import DrivingNet, DrivingNetConfig

PRETRAINED_NAC = str(Path(__file__).parents[1] / "pretrained" / "nac")  # the policy whose episodes bench env times


def camera_frames(n: int, seed: int = 0) -> np.ndarray:
    """(n, 96, 96, 3) frames of a real episode driven by the track expert."""
    env = make_env(continuous=True, max_steps=n)
    expert = make_expert("track", env)
    obs, _ = env.reset(seed=seed)
    expert.reset()
    frames = []
    for _ in range(n):
        frames.append(obs)
        obs, _, term, trunc, _ = env.step(expert.select_action(obs))
        if term or trunc:
            obs, _ = env.reset(seed=seed + 1)
            expert.reset()
    env.close()
    return np.stack(frames)


def step_latency(policy: DrivingPolicy, frames: np.ndarray, warmup: int = 50) -> dict[str, float]:
    """select_action over the frames as one episode; percentiles in milliseconds (warm-up excluded)."""
    policy.reset()
    ms = []
    for i, frame in enumerate(frames):
        t0 = time.perf_counter()
        policy.select_action(frame)
        if i >= warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    return percentiles(ms)


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"steps": len(a), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max())}


ENV_ROWS = ("gymnasium CarRacing-v3", "FastCarRacing, renderer gymnasium", "FastCarRacing, renderer direct")


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def bench_env(steps: int = 1000, seed: int = 0, policy: str | None = None) -> list[dict[str, Any]]:
    """The simulator's costs, each beside gymnasium's CarRacing-v3 step measured in the same run
    (x_gymnasium: how many of gymnasium's steps, at the median, fit in the same time):

    - env.step of gymnasium's CarRacing-v3, of FastCarRacing drawing gymnasium's pixels and of
      FastCarRacing's direct renderer, the same actions (the track expert's) on the same track,
      taken in turn in blocks of 50 steps (the three stay in lock step); with how many observations
      differ from gymnasium's (0 expected of renderer gymnasium) and the direct frames' mean
      absolute difference per channel;
    - the observation alone (gymnasium's drawing against the direct renderer's, the same states);
    - a planned step of the discrete track expert (its 40-step look-ahead over every candidate);
    - whole episodes of `steps` steps: the discrete expert recording pixels, and a policy (a run
      folder; default the shipped NAC) driving, as episodes per minute.
    """
    torch.set_num_threads(1)
    envs = {ENV_ROWS[0]: gym.make(ENV_ID, continuous=True, max_episode_steps=steps),
            ENV_ROWS[1]: make_env(True, steps, renderer="gymnasium"), ENV_ROWS[2]: make_env(True, steps)}
    for env in envs.values():
        env.reset(seed=seed)
    expert = make_expert("track", envs[ENV_ROWS[0]])
    expert.reset()
    ms: dict[str, list[float]] = {name: [] for name in envs}
    render: dict[str, list[float]] = {"gymnasium's drawing": [], "direct renderer": []}
    direct = DirectRenderer()
    gym_env, exact_env, direct_env = envs.values()
    taken, differ, diff, done = 0, 0, [], False
    while taken < steps and not done:
        block, ref = [], []  # the expert's actions on gymnasium's env, and its frames; the others replay them
        for _ in range(min(50, steps - taken)):
            block.append(expert.select_action(None))
            start = time.perf_counter()
            obs, _, term, trunc, _ = gym_env.step(block[-1])
            ms[ENV_ROWS[0]].append((time.perf_counter() - start) * 1e3)
            ref.append(obs)
            u = gym_env.unwrapped
            render["gymnasium's drawing"].append(_time(lambda: CarRacing._render(u, "state_pixels")))
            render["direct renderer"].append(_time(lambda: direct.frame(u)))
            if term or trunc:
                done = True
                break
        for name, env in ((ENV_ROWS[1], exact_env), (ENV_ROWS[2], direct_env)):
            for action, frame in zip(block, ref):
                start = time.perf_counter()
                obs = env.step(action)[0]
                ms[name].append((time.perf_counter() - start) * 1e3)
                if env is exact_env:
                    differ += int(not np.array_equal(frame, obs))
                else:
                    diff.append(np.abs(frame.astype(np.int16) - obs.astype(np.int16)).mean(axis=(0, 1)))
        taken += len(block)
    base = float(np.percentile(ms[ENV_ROWS[0]], 50))

    def row(what: str, name: str, values: list[float], **extra: Any) -> dict[str, Any]:
        stats = percentiles(values)
        return {"what": what, "name": name, **stats, "x_gymnasium": base / stats["p50_ms"], **extra}

    rows = [row("env.step", ENV_ROWS[0], ms[ENV_ROWS[0]]),
            row("env.step", ENV_ROWS[1], ms[ENV_ROWS[1]], frames_differing=differ),
            row("env.step", ENV_ROWS[2], ms[ENV_ROWS[2]], mean_abs_diff=np.mean(diff, axis=0).round(3).tolist())]
    rows += [row("observation", name, v) for name, v in render.items()]

    planner_env = make_env(False, steps, pixels=False)
    planner = make_expert("track", planner_env)
    planner_env.reset(seed=seed)
    planner.reset()
    planned = []
    for _ in range(steps):
        start = time.perf_counter()
        a = planner.select_action(None)
        planned.append((time.perf_counter() - start) * 1e3)
        if any(planner_env.step(a)[2:4]):
            break
    rows.append(row("planned expert step", "discrete track expert, 40-step look-ahead", planned))

    from agents.driving.rollout import run_episode  # here: rollout imports the executor, which the other benches need not

    for name, make_driver, continuous in (("discrete track expert, recording pixels", lambda e: make_expert("track", e), False),
                                          (f"policy {policy or 'agents/pretrained/nac'}", lambda e: DrivingPolicy.from_run(policy or PRETRAINED_NAC), True)):
        env = make_env(continuous, steps)
        driver = make_driver(env)
        start = time.perf_counter()
        result = run_episode(env, driver, seed)
        seconds = time.perf_counter() - start
        env.close()
        rows.append({"what": "episode", "name": name, "steps": result.length, "seconds": seconds,
                     "episodes_per_minute": 60 * steps / result.length / seconds if result.length else 0.0,
                     "x_gymnasium": base * result.length / 1e3 / seconds})
    return rows


def bench_policies(runs: list[str], heads: list[str], steps: int = 1000, threads: int = 1) -> list[dict[str, Any]]:
    """Latency of each run's policy (or of an untrained network per head), same frames, one process."""
    torch.set_num_threads(threads)
    frames = camera_frames(steps)
    rows = []
    for run in runs:
        policy = DrivingPolicy.from_run(run)
        rows.append({"policy": run, "head": policy.cfg.head, **step_latency(policy, frames)})
    for head in heads:
        torch.manual_seed(0)
        policy = DrivingPolicy(DrivingNet(DrivingNetConfig(head=head)))
        rows.append({"policy": f"untrained {head}", "head": head, **step_latency(policy, frames)})
    return rows
