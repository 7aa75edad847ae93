"""Export one checkpoint of a PPO run as an expert folder that `--expert ppo --model DIR` drives, so that a run's
warm start (its checkpoint at 0 steps) and its best evaluation can be paired on the same tracks.

Run from the repository root:
    python docs/studies/ppo-expert/export_checkpoint.py runs/ppo-warm6 0 runs/ppo-warm6-at0
(`nacdrive expert train` itself exports only the best evaluation, to RUN/expert.)
"""
import json
import sys
from pathlib import Path

from stable_baselines3 import PPO

from agents.experts.ppo import PPOTrainConfig, export


def main(run: str, steps: str, out: str) -> None:
    cfg = PPOTrainConfig(**json.loads((Path(run) / "config.json").read_text())["train"])
    model = PPO.load(str(Path(run) / "checkpoints" / f"ppo_{steps}_steps.zip"), device="cpu")
    export(model, cfg, Path(out))
    print(f"{run} at {steps} steps -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
