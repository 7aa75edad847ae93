"""Where a run's laps under jitter are lost: the frames it sees, their times, or its held controls.

A diagnostic for docs/results.md ("Why NAC loses laps under jitter"), not a command of the tool:
    PYTHONPATH=. python docs/studies/nac-jitter-diagnosis/diagnose.py RUN MODE --seeds 10002,10005 [--jitter 3]

MODE:
- jitter: the policy as `nacdrive evaluate --perturb jitter=J` drives it (frames 1..J steps apart,
  their true times, the action held until the next frame).
- regular-times: the same frames and holds, but the policy is told the frames came one step apart.
- fresh: on every step the policy decides on a window whose earlier frames are picked 1..J steps
  apart, as training's irregular windows are (datasets.windows.jittered_back, drawn afresh each
  step), with their true times; nothing is held. (`--perturb hold=J` is the other half: every
  frame seen on time, each decision held 1..J steps.)
"""

import argparse

import numpy as np
import torch

from agents.carracing import perturb
from agents.carracing.env import FPS, make_env
from agents.driving.policy import DrivingPolicy, load_run
from agents.driving.rollout import run_episode
from datasets.windows import jittered_back


class RegularTimes:
    """The policy, told each frame it sees came one step after the last."""

    def __init__(self, policy: DrivingPolicy) -> None:
        self.policy = policy

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed)

    def select_action(self, frame: np.ndarray, timestamp: float | None = None) -> np.ndarray:
        return self.policy.select_action(frame)  # no timestamp: the policy counts its own calls


class FreshWindows:
    """Decides on every step on an irregular window ending at the current frame, drawn afresh."""

    def __init__(self, run: str, max_gap: int, seed: int) -> None:
        self.net, self.max_gap = load_run(run, "best", "cpu"), max_gap
        self.rng = np.random.default_rng(seed)
        self.feats: list[torch.Tensor] = []

    def reset(self) -> None:
        pass

    @torch.inference_mode()
    def select_action(self, frame: np.ndarray) -> np.ndarray:
        self.feats.append(self.net.encode(torch.as_tensor(np.ascontiguousarray(frame))[None]))
        n = len(self.feats)
        idx = np.maximum(n - 1 - jittered_back(1, self.net.config.window, self.max_gap, self.rng)[0], 0)
        times = torch.as_tensor(idx / FPS, dtype=torch.float32)[None]
        return self.net.squash(self.net.decide(torch.cat([self.feats[i] for i in idx])[None], times)[0]).numpy()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("mode", choices=["jitter", "regular-times", "fresh"])
    p.add_argument("--seeds", required=True, help="comma-separated episode seeds")
    p.add_argument("--jitter", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        if args.mode == "fresh":
            driver = FreshWindows(args.run, args.jitter, seed)
        else:
            policy = DrivingPolicy.from_run(args.run, "best", "cpu")
            policy.reset(seed)
            inner = RegularTimes(policy) if args.mode == "regular-times" else policy
            driver = perturb.PerturbedPolicy(inner, perturb.parse(f"jitter={args.jitter}"), continuous=True)
            driver.reset(seed)
        env = make_env(True)
        try:
            r = run_episode(env, driver, seed)
        finally:
            env.close()
        rows.append((r.episode_return, r.lap_finished))
        print(f"{args.mode} seed {seed}: {r.episode_return:.1f}{'' if r.lap_finished else ' (lap lost)'}", flush=True)
    print(f"{args.mode}: mean {np.mean([x for x, _ in rows]):.1f}, {sum(f for _, f in rows)} laps of {len(rows)}")


if __name__ == "__main__":
    main()
