"""Training PilotNet (with a registry head) on Udacity simulator recordings, and the steering
policy the live bridge drives with.

Loss: mean squared error on the normalised steering angle, as PilotNet (with speed_output, plus
that of the speed as a share of SPEED_MAX). The split is by
recording session (see datasets.udacity.split_by_session); training samples pick a camera and
are augmented, deterministically under (seed, epoch, index).
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from agents.driving.policy import resolve_device
from agents.training.distributed import Dist, init_distributed, summed
from agents.training.loop import TrainConfig, fit, prepare_run, to_device
from datasets.demos import DataError
from datasets.udacity import UdacityDataset, preprocess, read_logs, recorded_seeds, split_by_session
from nac.checkpoint import load_checkpoint, read_json
from nac.pilotnet import SPEED_MAX, PilotNet, PilotNetConfig

# How the bridge drives a run that does not predict its speed: toward a fixed target speed that drops by a share at
# full steering lock. The best measured on the stand-in (docs/udacity.md: at 20 mph and 0.8 the hairpins are taken
# slowly enough to stay on the road and the straights fast enough to finish a lap within 1000 steps).
DECODERS = min(4, os.cpu_count() or 1)  # threads decoding a batch's camera images
DRIVE_SPEED = 20.0  # mph
TURN_SLOWDOWN = 0.8


@functools.cache
def _decoders() -> ThreadPoolExecutor:
    """The threads that decode a batch's camera images, one pool for every run of the process."""
    return ThreadPoolExecutor(DECODERS, thread_name_prefix="jpeg")


# A process forked from this one (the episode workers of agents.driving.executor) has none of the pool's threads:
# it makes a pool of its own, where the inherited one would take its work and never do it
os.register_at_fork(after_in_child=_decoders.cache_clear)


def stacked(data: UdacityDataset, rows: list[int]) -> dict[str, np.ndarray]:
    """Items `rows` of `data`, stacked: "image" (N, 3, 66, 200) uint8, "steering" and "speed" (N,) float32. Each
    image decoded and augmented at once: OpenCV and numpy release the GIL, and an item is a function of (seed, epoch,
    index) alone. numpy only in those threads: torch's own threads, started from them, hung a process forked afterwards
    (a study's episode workers) at its first parallel torch operation."""
    items = list(_decoders().map(data.arrays, rows))
    return {k: np.stack([it[k] for it in items]) for k in ("image", "steering", "speed")}


class UdacityTrainable:
    def __init__(self, cfg: TrainConfig, quiet: bool) -> None:
        rec = read_logs(cfg.data)
        if not quiet:
            print(f"Udacity data: {rec.report()}")
        train_idx, val_idx = split_by_session(rec, cfg.val_fraction, cfg.seed)
        if not train_idx or not val_idx:
            raise DataError("training needs rows on both sides of the split: record more")
        self.train = UdacityDataset(rec, train_idx, train=True, seed=cfg.seed)
        self.val = UdacityDataset(rec, val_idx, train=False)
        torch.manual_seed(cfg.seed)
        self.net = PilotNet(PilotNetConfig.from_dict({**cfg.net, "head": cfg.head}))
        self.label = f"pilotnet-{cfg.head}"
        self.seed, self.batch_size = cfg.seed, cfg.batch_size
        self._order: tuple[int, np.ndarray] | None = None  # (epoch, its order of the training rows)
        self.extra = {
            "train": asdict(cfg),
            "data": {"rows": len(rec.samples), "train_rows": len(train_idx), "val_rows": len(val_idx),
                     "sessions": len(rec.sessions()), "skipped_rows": len(rec.skipped),
                     "tracks": recorded_seeds(cfg.data)},  # kept with the run, which may travel without its recordings
        }

    def batches_per_epoch(self) -> int:
        return -(-len(self.train) // self.batch_size)

    def batch(self, epoch: int, b: int, device: torch.device) -> dict[str, Tensor]:
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(len(self.train)))
            self.train.set_epoch(epoch)
        rows = self._order[1][b * self.batch_size : (b + 1) * self.batch_size]
        return to_device(stacked(self.train, rows.tolist()), device)

    def loss(self, model: nn.Module, batch: dict[str, Tensor], device: torch.device) -> tuple[Tensor, dict[str, Tensor]]:
        steer, speed = model(batch["image"])  # through DistributedDataParallel when there are several processes
        loss = F.mse_loss(steer.float(), batch["steering"])
        if speed is not None:
            loss = loss + F.mse_loss(speed.float() / SPEED_MAX, batch["speed"] / SPEED_MAX)
        return loss, {"mae": (steer.detach().float() - batch["steering"]).abs().mean()}

    @torch.no_grad()
    def validate(self, device: torch.device, share: Dist = Dist()) -> dict[str, float]:
        """Steering error over the validation rows; under torchrun each process takes every world-th block of 128
        rows and the sums are added up, so every process gets the figures of all of them."""
        self.net.eval()
        sums = np.zeros(4)  # squared steering error, absolute steering error, absolute speed error (mph), rows
        for i in range(share.rank * 128, len(self.val), 128 * share.world):
            rows = stacked(self.val, list(range(i, min(len(self.val), i + 128))))
            steer, speed = self.net(torch.from_numpy(rows["image"]).to(device))
            err = steer.float().cpu() - torch.from_numpy(rows["steering"])
            speed_err = 0.0 if speed is None else float((speed.float().cpu() - torch.from_numpy(rows["speed"])).abs().sum())
            sums += [float((err**2).sum()), float(err.abs().sum()), speed_err, len(err)]
        se, ae, speed_ae, n = summed(share, sums.tolist(), device)
        # val_loss is the steering MSE alone, with or without the speed output: the paper's Udacity figure
        m = {"val_loss": se / n, "val_mae": ae / n}
        if self.net.config.speed_output:
            m["val_speed_mae"] = speed_ae / n  # mph
        return m


def train_udacity(cfg: TrainConfig, resume: bool = False, quiet: bool = False, restart_best: bool = False) -> dict[str, Any]:
    cfg = prepare_run(cfg, resume)
    dist_info, device = init_distributed(resolve_device(cfg.device))
    return fit(UdacityTrainable(cfg, quiet), cfg, dist_info, device, resume, quiet, restart_best)


def training_tracks(run: str | Path) -> list[int]:
    """The stand-in tracks a PilotNet run was trained on, never to be its evaluation tracks: as its config.json
    keeps them, or (a run trained before it kept them) as its recordings, if they are still where they were."""
    p = Path(run) / "config.json"
    if not p.is_file():
        return []
    config = read_json(p)
    if "tracks" in config.get("data", {}):
        return [int(s) for s in config["data"]["tracks"]]
    return recorded_seeds(config.get("train", {}).get("data", []))


class SteeringPolicy:
    """A trained PilotNet run: 320x160 RGB camera frame -> steering in [-1, 1]. After each frame
    `last` holds what the network produced: {"steering", "speed"} (speed in mph, None unless the
    run predicts it)."""

    def __init__(self, net: PilotNet) -> None:
        self.net = net.eval()
        self.device = next(net.parameters()).device
        self.last: dict[str, float | None] = {}

    @property
    def predicts_speed(self) -> bool:
        return self.net.config.speed_output

    @classmethod
    def from_run(cls, path: str | Path, weights: str = "best", device: str = "cpu") -> "SteeringPolicy":
        p = Path(path)
        if not p.is_dir():
            raise FileNotFoundError(f"{p} is not a run folder (train one with 'nacdrive train --task udacity')")
        config, state = load_checkpoint(p, "cpu", weights)
        return cls(PilotNet.from_checkpoint(config, state, p).to(resolve_device(device)))

    def reset(self) -> None:
        pass

    @torch.inference_mode()
    def select_action(self, rgb: np.ndarray) -> float:
        x = torch.from_numpy(preprocess(rgb)).permute(2, 0, 1)[None].to(self.device)
        steer, speed = self.net(x)
        self.last = {"steering": float(steer[0]), "speed": None if speed is None else float(speed[0])}
        return self.last["steering"]
