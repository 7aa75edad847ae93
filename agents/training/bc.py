"""Behaviour cloning of the CarRacing driving network on windows of demonstration frames: the recipe's frame gaps, the
network's config, k-fold runs and the task the loop trains (CarRacingTrainable).

Its parts live beside it: the batches (agents.training.batches: chunks of consecutive steps whose overlapping windows
share their frames), what is learned and its loss (agents.training.labels), the closed-loop selection
(agents.training.closed_loop). The loop itself (devices, budget, checkpoints, resume) is agents.training.loop's.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from agents.training.augment import augment
from agents.carracing.seeds import SELECT_SEED
from agents.driving.policy import resolve_device
from agents.training.distributed import Dist, barrier, init_distributed, summed
from agents.training.loop import TrainConfig, fit, prepare_run, to_device
from datasets.demos import DataError
from nac.checkpoint import holds_anything, write_json
from datasets.windows import FrameWindows, arrival_back, jittered_back, kfold_by_episode, split_by_episode
from nac.driving import DrivingNet, DrivingNetConfig
from nac.config import ConfigError
from agents.training.labels import SAW, class_weights, labels, loss_classes, loss_terms, net_targets, turn_rates
from agents.training.batches import Batches, Demos, chunk_of_frames, shifted, two_views
from agents.training.closed_loop import closed_loop_return


def frame_gaps(continuous: bool, stride_jitter: int | None = None, regular_share: float | None = None) -> dict[str, Any]:
    """The frame gaps of the training windows, the given ones where not None, else the recipe's: with continuous actions
    every head trains on a mix, half the windows with regular gaps and half with gaps of 1..3 steps and their true
    timestamps, so that it holds when frames come late or are dropped (docs/studies/robustness-gap-mix/, 'Robustness');
    the discrete recipe keeps regular windows. One rule for every head, so that a comparison of heads compares the
    architectures and not their training: a head without a time input (LSTM, GRU, MHA) sees every gap as one step, and
    the mix did not separate from regular windows for any of them (ibid.), where it lifted NAC in every run."""
    return {"stride_jitter": (3 if continuous else 1) if stride_jitter is None else stride_jitter,
            "regular_share": (0.5 if continuous else 0.0) if regular_share is None else regular_share}


def feature_match(clean: Tensor, views: Tensor) -> Tensor:
    """The consistency loss's distance between each frame's features in the clean and the augmented view (N, E) each:
    their mean squared difference over the clean features' variance across the batch, the clean ones held fixed (Lee
    et al. 2020's feature matching, made scale-free). Raw, the distance is smallest when every frame's features are
    alike, so that a network lowers it by shrinking what tells frames apart: on the shipped NAC policy's features of
    a track the raw distance to colour+randmix views is 11.3 against a variance of 0.83 per feature, and a run at
    weight 0.01 (0.11, ten times its action loss) never learnt to drive (docs/studies/augment-natural/). Over the
    variance, shrinking every feature alike gains nothing."""
    clean = clean.detach().float()
    return (views.float() - clean).pow(2).mean() / clean.var(0, unbiased=False).mean().clamp_min(1e-12)


def net_config(cfg: TrainConfig, action_space: str) -> DrivingNetConfig:
    return DrivingNetConfig.from_dict(
        {**cfg.net, "head": cfg.head, "window": cfg.window, "frame_stride": cfg.frame_stride, "action_space": action_space}
    )


@torch.no_grad()
def validate(net: DrivingNet, windows: FrameWindows, device: torch.device, batch_rows: int = 512, loss: str = "mse",
             share: Dist = Dist()) -> dict[str, float]:
    """Loss (unweighted) and accuracy over every window of the validation episodes, each block of rows encoding
    its frames once. Under torchrun each process takes every world-th block and the sums are added up: every
    process gets the figures of all the windows, none waits while another validates alone."""
    was_training = net.training
    net.eval()
    s = windows.store
    targets = net_targets(net, s)
    sums = np.zeros(4)  # loss, correct, steering error, rows
    for i in range(share.rank * batch_rows, len(s), batch_rows * share.world):
        rows = np.arange(i, min(len(s), i + batch_rows))
        idx, _ = windows.indices(rows)
        uniq, inverse = np.unique(idx, return_inverse=True)
        feats = torch.cat([net.embed(torch.from_numpy(s.frames[uniq[j : j + 256]]).to(device)).float() for j in range(0, len(uniq), 256)])
        batch = to_device(labels(s, rows, targets), device)
        raw = net.decide(feats[torch.from_numpy(inverse.reshape(idx.shape)).to(device)], torch.from_numpy(s.timestamps[idx]).float().to(device), embedded=True)
        per_row, ok = loss_terms(net, raw, batch, None, loss)
        steer = (net.squash(raw.float())[:, 0] - batch["actions"][:, 0].float()).abs().sum() if net.config.action_space == "continuous" else 0.0
        sums += [float(per_row.double().sum()), float(ok.double().sum()), float(steer), len(rows)]
    loss_sum, correct, steer_sum, n = summed(share, sums.tolist(), device)
    net.train(was_training)
    out = {"val_loss": loss_sum / n, "val_accuracy": correct / n}
    if net.config.action_space == "continuous":
        out["val_steer_mae"] = steer_sum / n
    return out


# ---------------------------------------------------------------------- training
def resolve_config(cfg: TrainConfig, demos: Demos, fold_split: tuple[list[str], list[str]] | None) -> TrainConfig:
    """The run's config with what depends on the data filled in: the validation episodes, and the
    frame gaps left to the recipe (None) as it gives them for the action space."""
    cfg = replace(cfg, **frame_gaps(demos.action_space == "continuous", cfg.stride_jitter, cfg.regular_share))
    if cfg.val_episodes is None:
        keys = sorted(demos.files)
        val = fold_split[1] if fold_split else split_by_episode(keys, cfg.val_fraction, cfg.seed)[1]
        cfg = TrainConfig.from_dict({**asdict(cfg), "val_episodes": list(val)})
    missing = [k for k in cfg.val_episodes or [] if k not in demos.files]
    if missing:
        raise DataError(f"validation episodes {missing[:3]} are not in the data folders {cfg.data}")
    return cfg


def train_carracing(cfg: TrainConfig, resume: bool = False, quiet: bool = False, restart_best: bool = False) -> dict[str, Any]:
    """Train (or resume) a CarRacing run; k-fold when cfg.folds > 1. Returns the run's metrics."""
    cfg = prepare_run(cfg, resume)
    if cfg.folds > 1:
        return _train_folds(cfg, resume, quiet)
    return _train_one(cfg, Demos.load(cfg.data, quiet), None, resume, quiet, restart_best)


def _train_folds(cfg: TrainConfig, resume: bool, quiet: bool) -> dict[str, Any]:
    demos = Demos.load(cfg.data, quiet)
    splits = kfold_by_episode(sorted(demos.files), cfg.folds, cfg.seed)
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    folds = []
    for k, split in enumerate(splits):
        sub = run / f"fold{k}"
        fold_cfg = TrainConfig.from_dict({**asdict(cfg), "out": str(sub), "folds": 1, "val_episodes": None})
        again = resume and (sub / "config.json").is_file()
        if again:
            fold_cfg = prepare_run(fold_cfg, True)
        elif holds_anything(sub):
            raise ConfigError(f"{sub} is not empty; use --resume")
        folds.append((fold_cfg, split, again))
    barrier(init_distributed(resolve_device(cfg.device))[0])  # under torchrun: every process checked the folders before one writes
    results = [_train_one(fold_cfg, demos, split, again, quiet) for fold_cfg, split, again in folds]
    if not all(results):  # a torchrun process other than rank 0: rank 0 summarises and writes, as for one run
        return {}
    accs = np.array([r["best"]["val_accuracy"] for r in results])
    losses = np.array([r["best"]["val_loss"] for r in results])
    summary = {
        "folds": cfg.folds,
        "val_accuracy_mean": float(accs.mean()),
        "val_accuracy_std": float(accs.std(ddof=1)),
        "val_loss_mean": float(losses.mean()),
        "val_loss_std": float(losses.std(ddof=1)),
        "per_fold": [r["best"] for r in results],
        "config": asdict(cfg),
    }
    write_json(run / "metrics.json", summary)
    return summary


def _train_one(
    cfg: TrainConfig, demos: Demos, fold_split: tuple[list[str], list[str]] | None, resume: bool, quiet: bool, restart_best: bool = False
) -> dict[str, Any]:
    cfg = resolve_config(cfg, demos, fold_split)
    dist_info, device = init_distributed(resolve_device(cfg.device))
    task = CarRacingTrainable(cfg, demos, resume)
    return fit(task, cfg, dist_info, device, resume, quiet, restart_best)


class CarRacingTrainable:
    """Windows of demonstration frames -> the driving network's action outputs."""

    def __init__(self, cfg: TrainConfig, demos: Demos, resume: bool) -> None:
        net_cfg = net_config(cfg, demos.action_space)
        val_keys = list(cfg.val_episodes or [])
        train_keys = sorted(k for k in demos.files if k not in set(val_keys))
        if not train_keys or not val_keys:
            raise DataError("training needs episodes on both sides of the split: record more episodes")
        self.train_windows = FrameWindows(demos.store(train_keys), net_cfg.window, net_cfg.frame_stride)
        self.val_windows = FrameWindows(demos.store(val_keys), net_cfg.window, net_cfg.frame_stride)
        torch.manual_seed(cfg.seed)
        self.net = DrivingNet(net_cfg)
        if cfg.init_from and not resume:
            from agents.driving.policy import load_run  # the same checkpoint reader the policy uses

            init = load_run(cfg.init_from, "best")
            if init.config != net_cfg:
                raise ConfigError(f"--init-from {cfg.init_from} is a different network ({init.config.head}, window {init.config.window})")
            self.net.load_state_dict(init.state_dict())
        classes = loss_classes(net_cfg, self.train_windows.store.actions)
        self.class_weights = class_weights(classes)
        # auto: weights for discrete classes; none for continuous actions, for action rates (reweighted, they would
        # no longer be the expert's rates, which the policy reproduces by diffusion) and for wheel angles (regressed)
        plain_classes = net_cfg.action_space == "discrete" and not (net_cfg.rate_window or net_cfg.wheel_target)
        self.balance = cfg.balance if cfg.balance != "auto" else ("weights" if plain_classes else "none")
        targets = net_targets(self.net, self.train_windows.store)
        if cfg.turn_weight:  # the wheel angle's error weighted where the expert's plan turns fast (TrainConfig.turn_weight)
            targets["angle_weight"] = 1.0 + np.float32(cfg.turn_weight) * turn_rates(self.train_windows.store)
        self.batches = Batches(self.train_windows, cfg.chunk, cfg.batch_size, self.class_weights[classes] if self.balance == "sampler" else None,
                               targets)
        self.seed = cfg.seed
        self.stride_jitter, self.regular_share, self.shift, self.augment = cfg.stride_jitter, cfg.regular_share, cfg.shift, cfg.augment
        self.consistency = cfg.consistency
        self.arrival = arrival_back(self.train_windows.store, SAW, net_cfg.window) if cfg.arrival_windows else None
        self.loss_kind = cfg.loss
        self.select_seeds = list(range(SELECT_SEED, SELECT_SEED + cfg.select_episodes))
        self.select_steps = cfg.select_steps
        self.label = net_cfg.head
        self.extra = {"train": asdict(cfg), "data": _data_summary(demos, train_keys, val_keys)}
        self._order: tuple[int, np.ndarray] | None = None
        self._weights: Tensor | None = None

    def batches_per_epoch(self) -> int:
        return len(self.batches)

    def batch(self, epoch: int, b: int, device: torch.device) -> dict[str, Tensor]:
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, self.batches.order(self.seed, epoch))
        per = self.batches.per_batch
        chunks = self._order[1][b * per : (b + 1) * per]
        rows = self.batches.rows(chunks)
        back = None
        if self.stride_jitter > 1:  # the timing a policy meets when frames arrive irregularly
            rng = np.random.default_rng([self.seed, epoch, b])
            back = jittered_back(len(rows), self.train_windows.window, self.stride_jitter, rng, self.regular_share)
        if self.arrival is not None:
            arrival, has = self.arrival[0][rows], self.arrival[1][rows]  # arrival's other rows hold the regular window
            if has.any():  # the windows the policy saw, where it decided
                back = arrival if back is None else np.where(has[:, None], arrival, back)
        host = self.batches.batch(rows, back)
        batch = to_device(host, device)
        if self.shift or self.augment != "none":
            chunk_of_row = np.repeat(np.arange(len(chunks)), self.batches.lengths[chunks])
            chunk = chunk_of_frames(len(host["frames"]), host["index"], chunk_of_row)
            if self.shift:
                batch["frames"] = shifted(batch["frames"], chunk, self.shift, np.random.default_rng([self.seed, epoch, b, 1]))
            rng = np.random.default_rng([self.seed, epoch, b, 2])
            if self.consistency:  # the clean view and one with every chunk augmented
                batch = two_views(batch, augment(batch["frames"], chunk, self.augment, rng, share=1.0))
            else:
                batch["frames"] = augment(batch["frames"], chunk, self.augment, rng)
        return batch

    def loss(self, model: nn.Module, batch: dict[str, Tensor], device: torch.device) -> tuple[Tensor, dict[str, Tensor]]:
        out = model(batch["frames"], batch["timestamps"], batch["index"], features=bool(self.consistency))
        raw, feats = out if self.consistency else (out, None)
        per_row, correct = loss_terms(self.net, raw, batch, self._loss_weights(device), self.loss_kind)
        figures = {"acc": correct.float().mean()}
        if feats is None:
            return per_row.mean(), figures
        u = len(feats) // 2  # two_views: the clean frames' features, then the augmented ones'
        match = feature_match(feats[:u], feats[u:])
        return per_row.mean() + self.consistency * match, {**figures, "match": match.detach()}

    def _loss_weights(self, device: torch.device) -> Tensor | None:
        """The class weights as a tensor on `device`, made once (the loss runs every step)."""
        if self.balance != "weights":
            return None
        if self._weights is None or self._weights.device != device:
            self._weights = torch.tensor(self.class_weights, dtype=torch.float32, device=device)
        return self._weights

    def validate(self, device: torch.device, share: Dist = Dist()) -> dict[str, float]:
        m = validate(self.net, self.val_windows, device, loss=self.loss_kind, share=share)
        if self.select_seeds:  # checkpoint choice by driving: val_return decides what "best" is
            m["val_return"] = closed_loop_return(self.net, self.select_seeds, self.select_steps, share, device)
        return m


def _data_summary(demos: Demos, train_keys: list[str], val_keys: list[str]) -> dict[str, Any]:
    frames = {k: n for k, (_, n) in demos.files.items()}
    return {
        "action_space": demos.action_space,
        "train_episodes": len(train_keys),
        "train_frames": sum(frames[k] for k in train_keys),
        "val_episodes": len(val_keys),
        "val_frames": sum(frames[k] for k in val_keys),
        "episodes": sorted(train_keys + val_keys),  # evaluation refuses these seeds
    }
