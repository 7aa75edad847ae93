"""Per-step latency of driving policies on one CPU thread (`nacdrive bench policy`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from agents.env import make_env
from agents.experts import make_expert
from agents.policy import DrivingPolicy
from nac.driving import DrivingNet, DrivingNetConfig


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
    a = np.asarray(ms)
    return {"steps": len(a), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max())}


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
