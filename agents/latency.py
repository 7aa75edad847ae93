"""Per-step latency of driving policies on one CPU thread (`nacdrive bench policy`), of the
simulator's step with gymnasium's renderer against ours (`nacdrive bench env`), and of a training
step with torch's dropout against ours (`nacdrive bench train`)."""

from __future__ import annotations

import copy
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agents.env import ENV_ID, FAST_ID, make_env
from agents.experts import make_expert
from agents.policy import DrivingPolicy
from nac.driving import Dropout, DrivingNet, DrivingNetConfig


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


def bench_env(steps: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """env.step of gymnasium's CarRacing-v3 and of ours (FastCarRacing), stepped in turn in one
    process with the same actions (the track expert's) on the same track: per-step percentiles,
    and how many of the observations differed (0 expected)."""
    torch.set_num_threads(1)
    envs = {name: gym.make(env_id, continuous=True, max_episode_steps=steps) for name, env_id in
            (("gymnasium CarRacing-v3", ENV_ID), ("nac-drive FastCarRacing", FAST_ID))}
    obs = {name: env.reset(seed=seed)[0] for name, env in envs.items()}
    expert = make_expert("track", envs["gymnasium CarRacing-v3"])
    expert.reset()
    ms: dict[str, list[float]] = {name: [] for name in envs}
    differ = 0
    for _ in range(steps):
        action = expert.select_action(obs["gymnasium CarRacing-v3"])
        for name, env in envs.items():
            t0 = time.perf_counter()
            obs[name], _, term, trunc, _ = env.step(action)
            ms[name].append((time.perf_counter() - t0) * 1e3)
        differ += int(not np.array_equal(*obs.values()))
        if term or trunc:
            break
    return [{"env": name, **percentiles(ms[name]), "frames_differing": differ} for name in envs]


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


def with_torch_dropout(net: torch.nn.Module) -> torch.nn.Module:
    """A copy of net (same weights) whose Dropout layers are torch's nn.Dropout."""
    twin = copy.deepcopy(net)
    for module in list(twin.modules()):
        for name, child in module.named_children():
            if isinstance(child, Dropout):
                setattr(module, name, torch.nn.Dropout(child.p))
    return twin


def bench_train(heads: list[str], steps: int = 60, threads: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """One behaviour-cloning step (forward, backward, Adam) of the driving network per head, on
    batches as training builds them (32 windows of 8 frames, 4 runs of 8 overlapping windows:
    60 distinct real frames), with nac-drive's Dropout and, on a copy of the network, torch's,
    taken in turn in blocks of 5 steps in one process: per-step percentiles and the ratio of medians."""
    torch.set_num_threads(threads)
    frames = torch.from_numpy(camera_frames(600, seed))
    rng = np.random.default_rng(seed)
    rows = []
    for head in heads:
        torch.manual_seed(seed)
        ours = DrivingNet(DrivingNetConfig(head=head, action_space="continuous"))
        nets = {"nac-drive Dropout": ours, "torch nn.Dropout": with_torch_dropout(ours)}
        opts = {name: torch.optim.Adam(net.parameters(), 1e-4, fused=True) for name, net in nets.items()}  # as training steps
        ms: dict[str, list[float]] = {name: [] for name in nets}
        for block in range(2 * (steps // 5 + 1)):
            name = list(nets)[block % 2]
            net, opt = nets[name].train(), opts[name]
            for _ in range(5):
                starts = rng.integers(0, len(frames) - 15, size=4)
                rows_ = np.concatenate([np.arange(s, s + 15) for s in starts])  # 4 x 15 distinct frames
                index = torch.tensor([[r * 15 + w + k for k in range(8)] for r in range(4) for w in range(8)])
                t0 = time.perf_counter()
                loss = net(frames[rows_], index.float() / 50.0, index).pow(2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                ms[name].append((time.perf_counter() - t0) * 1e3)
        stats = {name: percentiles(v[5:]) for name, v in ms.items()}  # the first block warms up
        ratio = stats["torch nn.Dropout"]["p50_ms"] / stats["nac-drive Dropout"]["p50_ms"]
        rows += [{"head": head, "dropout": name, **st, "ratio_p50": ratio} for name, st in stats.items()]
    return rows
