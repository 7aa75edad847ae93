"""Behaviour cloning of the CarRacing driving network on windows of demonstration frames.

Batches are made of chunks of consecutive labelled steps: their windows overlap, so each
distinct frame is encoded once per batch (a chunk of 8 steps with windows of 8 frames needs 15
frames, not 64). The loop itself (devices, budget, checkpoints, resume) is agents.training.loop's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from agents.training.augment import augment
from agents.carracing.seeds import SELECT_SEED
from agents.carracing.env import STATE_FIELDS, WHEEL_LIMIT, WHEEL_RATE, make_env, wheel_action
from agents.driving.policy import DrivingPolicy, resolve_device
from agents.driving.rollout import run_episode
from agents.training.distributed import Dist, barrier, init_distributed, summed
from agents.training.loop import TrainConfig, fit, prepare_run, to_device
from datasets.demos import DataError, DemoSet, Episode, read_episode
from nac.checkpoint import write_json
from datasets.windows import FrameStore, FrameWindows, arrival_back, jittered_back, kfold_by_episode, split_by_episode
from nac.driving import DrivingNet, DrivingNetConfig
from nac.config import ConfigError
from nac.heads import HEADS

CLASSES = ("noop", "right", "left", "gas", "brake")  # what a step does, in either action space


BRAKE_ON = 0.1  # a continuous brake above this counts as braking (the action classes and the brake gate)

def frame_gaps(head: str, continuous: bool, stride_jitter: int | None = None, regular_share: float | None = None) -> dict[str, Any]:
    """The frame gaps of the training windows, the given ones where not None, else the recipe's: with continuous actions
    a head told the frames' times trains on a mix, half the windows with regular gaps and half with gaps of 1..3 steps and
    their true timestamps, so that it holds when frames come late or are dropped (docs/studies/robustness-gap-mix/,
    'Robustness'); the heads without a time input (LSTM, GRU, MHA) see every gap as one step and keep regular windows, as
    does the discrete recipe."""
    mix = continuous and getattr(HEADS.get(head), "accepts_time", False)
    return {"stride_jitter": (3 if mix else 1) if stride_jitter is None else stride_jitter,
            "regular_share": (0.5 if mix else 0.0) if regular_share is None else regular_share}


def net_config(cfg: TrainConfig, action_space: str) -> DrivingNetConfig:
    return DrivingNetConfig.from_dict(
        {**cfg.net, "head": cfg.head, "window": cfg.window, "frame_stride": cfg.frame_stride, "action_space": action_space}
    )


# ---------------------------------------------------------------------- data
def action_classes(actions: np.ndarray | Tensor) -> np.ndarray | Tensor:
    """(N,) class index into CLASSES of each action: the discrete action itself, or what a
    continuous (steer, gas, brake) does most (brake over steering over gas). A numpy array gives
    a numpy array; a tensor a tensor on its device (training's accuracy reads nothing back)."""
    tensor = isinstance(actions, Tensor)
    if actions.ndim == 1:
        return actions.long() if tensor else actions.astype(np.int64)
    where = torch.where if tensor else np.where
    steer, gas, brake = actions[:, 0], actions[:, 1], actions[:, 2]
    # CarRacing: negative steer turns left
    cls = where(brake > BRAKE_ON, 4, where(steer > 0.1, 1, where(steer < -0.1, 2, where(gas > 0.1, 3, 0))))
    return cls if tensor else cls.astype(np.int64)


class Demos:
    """Every episode of the given folders, keyed "folder:seed": where each one is and how long, read from the
    manifests; the frames are read once, by `store`, straight into the one array a training split keeps."""

    action_space: str
    files: dict[str, tuple[Path, int]]  # key -> (episode file, steps)

    @classmethod
    def load(cls, folders: list[str], quiet: bool = False) -> "Demos":
        sets = [DemoSet(f) for f in folders]
        spaces = {s.manifest.get("action_space") for s in sets}
        if len(spaces) != 1:
            raise DataError(f"the demonstration folders mix action spaces ({', '.join(sorted(map(str, spaces)))}); train on one")
        files: dict[str, tuple[Path, int]] = {}
        for s in sets:
            if not s.episodes:
                raise DataError(f"{s.dir} holds no episodes yet; record some with 'nacdrive collect'")
            for e in s.episodes:
                files[f"{s.dir.name}:{e['seed']}"] = (s.dir / e["file"], int(e["length"]))
        return cls(spaces.pop(), files, quiet)

    def __init__(self, action_space: str, files: dict[str, tuple[Path, int]], quiet: bool = True) -> None:
        self.action_space, self.files, self.quiet = action_space, files, quiet

    def episode(self, key: str) -> Episode:
        return read_episode(self.files[key][0])

    def store(self, keys: list[str]) -> FrameStore:
        read = (self.episode(k) for k in tqdm(keys, desc="loading episodes", unit="ep", leave=False, disable=self.quiet))
        return FrameStore(read, [self.files[k][1] for k in keys])


class Batches:
    """Chunks of consecutive steps of a store, in an order fixed by (seed, epoch)."""

    def __init__(self, windows: FrameWindows, chunk: int, batch_size: int, row_weights: np.ndarray | None,
                 targets: dict[str, np.ndarray] | None = None) -> None:
        s = windows.store
        self.targets = targets or {}  # per-row targets beyond the actions (net_targets)
        starts, lengths = [], []
        for first, n in zip(s.starts, s.lengths):
            st = np.arange(first, first + n, chunk)
            starts.append(st)
            lengths.append(np.minimum(chunk, first + n - st))
        self.windows = windows
        self.starts = np.concatenate(starts)
        self.lengths = np.concatenate(lengths)
        self.per_batch = max(1, batch_size // chunk)
        # balanced sampling: a chunk is drawn in proportion to its rows' weights
        self.p = None
        if row_weights is not None:
            w = np.add.reduceat(row_weights, self.starts)
            self.p = w / w.sum()

    def __len__(self) -> int:
        return math.ceil(len(self.starts) / self.per_batch)

    def order(self, seed: int, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([seed, epoch])
        n = len(self.starts)
        return rng.permutation(n) if self.p is None else rng.choice(n, size=n, p=self.p)

    def rows(self, chunks: np.ndarray) -> np.ndarray:
        return np.concatenate([np.arange(self.starts[c], self.starts[c] + self.lengths[c]) for c in chunks])

    def batch(self, rows: np.ndarray, back: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Distinct frames of the rows' windows, the index of each window into them, times, labels, on the host.
        back: irregular windows (see datasets.windows.jittered_back)."""
        s = self.windows.store
        idx, _ = self.windows.indices(rows, back)  # (n, W) frame rows
        uniq, inverse = np.unique(idx, return_inverse=True)
        return {
            "frames": s.frames[uniq],  # (U, H, W, 3)
            "index": inverse.reshape(idx.shape),  # (n, W)
            "timestamps": s.timestamps[idx].astype(np.float32),  # (n, W)
            **labels(s, rows, self.targets),
        }


def labels(store: FrameStore, rows: np.ndarray, targets: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the loss compares the rows' outputs with: the expert's actions, their classes, and
    the network's further targets (net_targets)."""
    actions = store.actions[rows]  # (n,) or (n, 3)
    return {"actions": actions, "classes": action_classes(actions), **{name: t[rows] for name, t in targets.items()}}


PLAN = STATE_FIELDS.index("plan_wheel_angle")
EXCESS = STATE_FIELDS.index("speed_excess")
WHEEL = STATE_FIELDS.index("wheel_angle")
SPEED = STATE_FIELDS.index("speed")
SAW = STATE_FIELDS.index("policy_saw")


def net_targets(net: DrivingNet, store: FrameStore) -> dict[str, np.ndarray]:
    """Per-row targets, beyond the actions, of the network's outputs: the action rates (rate_window,
    (N, A)); or the wheel angle the expert planned, the one the car had, the car's speed and its
    speed above the expert's target speed, clipped to +-excess_scale in its units (wheel_target,
    (N,) each)."""
    if net.config.rate_window:
        return {"rates": store.action_rates(net.config.rate_window, net.config.outputs)}
    if not net.config.wheel_target:
        return {}
    cols = [store.state[:, c] if store.state.shape[1] > c else np.full(len(store), np.nan, np.float32) for c in (PLAN, EXCESS)]
    missing = np.isnan(cols[0]) | np.isnan(cols[1])
    if missing.any():
        seed = store.seeds[int(store.episode_of[int(missing.argmax())])]
        raise DataError(
            f"a wheel-angle network learns the angle the expert plans and its speed above the expert's target, but "
            f"{int(missing.sum())} of {len(store)} steps have none (first in the episode of seed {seed}): only the discrete "
            "track expert records both (nacdrive collect --expert track --discrete), in demonstrations and DAgger "
            "rollouts recorded since it does; record them again"
        )
    if net.config.wheel_speed == "target":
        target = store.state[:, SPEED] - cols[1]  # the expert's target speed, from which it took the excess
        lo, hi = net.config.target_speeds
        if target.min() < lo - 1e-3 or target.max() > hi + 1e-3:
            raise DataError(f"the expert's target speeds in these demonstrations span {target.min():.1f}..{target.max():.1f} u/s, "
                            f"outside the network's target_speeds {lo:g}..{hi:g}: give net.target_speeds the expert's own bounds")
    excess = np.clip(cols[1] / net.config.excess_scale, -1.0, 1.0).astype(np.float32)
    return {"wheel_plan": cols[0], "wheel_now": store.state[:, WHEEL], "speed_now": store.state[:, SPEED], "speed_excess": excess}


TURN_SPAN = 10  # steps either side over which turn_rates measures the planned angle's change


def turn_rates(store: FrameStore) -> np.ndarray:
    """(N,) how fast the expert's planned wheel angle turns at each step, in units of the wheel's top
    rate (WHEEL_RATE): |plan(t + 10) - plan(t - 10)| / 20 steps, within an episode (cut short at its
    ends). Over +-10 steps the plan's pulse-by-pulse steps of 0.06 rad average out: 0 on a straight
    or a steady bend, about 0.35 where a left bend turns straight into a right one (0.66 rad in 30
    steps), the top 0.3 % of the quick start's discrete demonstrations."""
    plan = store.state[:, PLAN].astype(np.float64)
    out = np.zeros(len(store), np.float32)
    for first, n in zip(store.starts, store.lengths):
        t = np.arange(n)
        hi, lo = np.minimum(t + TURN_SPAN, n - 1), np.maximum(t - TURN_SPAN, 0)
        p = plan[first : first + n]
        out[first : first + n] = np.abs(p[hi] - p[lo]) / np.maximum(hi - lo, 1) / WHEEL_RATE
    return out


def chunk_of_frames(n_frames: int, idx: np.ndarray, chunk_of_row: np.ndarray) -> np.ndarray:
    """(U,) the chunk of each of a batch's frames: that of the first window that uses it, so that a
    window's frames take one chunk's random draws. idx (n, W) into the frames."""
    first_row = np.full(n_frames, idx.shape[0])
    np.minimum.at(first_row, idx.ravel(), np.repeat(np.arange(idx.shape[0]), idx.shape[1]))
    return chunk_of_row[np.minimum(first_row, idx.shape[0] - 1)]


def shifted(frames: Tensor, chunk: np.ndarray, pad: int, rng: np.random.Generator) -> Tensor:
    """Random-shift augmentation (DrQ, Kostrikov et al. 2020; RAD, Laskin et al. 2020): each chunk of
    consecutive steps is moved by (dy, dx) in -pad..pad with its edge pixels repeated (replicate
    padding, then the crop back to size). frames (U, H, W, 3) uint8, chunk (U,) each one's chunk
    (chunk_of_frames). Written here rather than taken from a library: torchvision's RandomCrop draws
    one shift per call, not per group of frames, and would be one more dependency for eight lines."""
    u, h, w = frames.shape[:3]
    dy, dx = rng.integers(-pad, pad + 1, size=(2, int(chunk.max()) + 1))
    ys = np.clip(np.arange(h)[None, :] + dy[chunk][:, None], 0, h - 1)  # (U, H)
    xs = np.clip(np.arange(w)[None, :] + dx[chunk][:, None], 0, w - 1)  # (U, W)
    frames_idx = torch.arange(u, device=frames.device)[:, None, None]
    return frames[frames_idx, torch.from_numpy(ys).to(frames.device)[:, :, None], torch.from_numpy(xs).to(frames.device)[:, None, :]]


def loss_classes(net: DrivingNetConfig, actions: np.ndarray) -> np.ndarray:
    """(N,) the classes that --balance evens out: the action classes, or for a wheel-angle network
    whether the expert brakes (0 / 1; its speed-excess error is weighted by them)."""
    classes = action_classes(actions)
    return (classes == 4).astype(np.int64) if net.wheel_target else classes


def class_weights(classes: np.ndarray) -> np.ndarray:
    """Inverse-frequency weights over CLASSES, normalized to a mean of 1 over the rows; classes
    never seen get weight 0."""
    counts = np.bincount(classes, minlength=len(CLASSES)).astype(np.float64)
    w = np.where(counts > 0, counts.sum() / np.maximum(counts, 1) / max(1, (counts > 0).sum()), 0.0)
    return w


# ---------------------------------------------------------------------- loss and metrics
def loss_terms(net: DrivingNet, raw: Tensor, batch: dict[str, Tensor], weights: Tensor | None, loss: str = "mse") -> tuple[Tensor, Tensor]:
    """Per-row loss (n,) and per-row correct-class flag (n,). Continuous actions: squared error
    ("mse", the conditional mean) or absolute error ("l1", the conditional median: an action that
    is mostly 0 with rare pulses, as the expert's brake is, then stays 0 where the mean would be a
    small constant brake)."""
    if net.config.wheel_target:
        # the planned angle (in units of the joint's range) and the speed excess (in units of excess_scale), both by
        # squared error; a row is correct when the action decoded at the recorded wheel angle is the expert's (the
        # row's own angle decoded: at drive time agents.carracing.env.WheelDecoder aims at the angle asked for WHEEL_DELAY steps
        # before, which a row alone does not hold, so this accuracy is a diagnostic of the outputs, not of the driving)
        labels = batch["actions"].long()
        angle = WHEEL_LIMIT * torch.tanh(raw[:, 0].float())
        label = batch["speed_excess"].float()
        excess = net.config.speed_excess(raw[:, 1].float(), batch["speed_now"].float())  # u/s
        if net.config.wheel_speed == "excess":
            speed_se = (raw[:, 1].float() - label) ** 2
        else:  # the excess the target implies at the recorded speed, its error censored as the label is clipped (at
            # -1, far below the target, any excess below -1 is right): the excess's error where it decides, as "excess"
            pred = excess / net.config.excess_scale
            speed_se = torch.where(label <= -1.0, F.relu(pred + 1.0), torch.where(label >= 1.0, F.relu(1.0 - pred), pred - label)) ** 2
        if weights is not None:  # balanced: weights over (no brake, brake), see loss_classes; the angle is not reweighted
            speed_se = speed_se * weights[(labels == 4).long()]
        angle_se = ((angle - batch["wheel_plan"].float()) / WHEEL_LIMIT) ** 2
        if "angle_weight" in batch:  # train --turn-weight: where the plan turns fast (training only; validation is unweighted)
            angle_se = angle_se * batch["angle_weight"]
        per_row = angle_se + speed_se
        return per_row, wheel_action(angle.detach(), excess.detach(), batch["wheel_now"]) == labels
    if net.config.action_space == "discrete":
        labels = batch["actions"].long()
        # a network trained on action rates: cross-entropy against the rates (soft targets)
        per_row = F.cross_entropy(raw.float(), batch.get("rates", labels), reduction="none")
        correct = raw.argmax(-1) == labels
    elif net.config.brake_gate:
        # whether to brake: cross-entropy on (expert brake > BRAKE_ON); how hard: the error of the
        # brake output on the rows where the expert brakes; steer and gas as without the gate
        raw = raw.float()
        target = batch["actions"].float()
        on = (target[:, 2] > BRAKE_ON).float()
        err = net.squash(raw, driven=False) - target
        err = torch.cat([err[:, :2], err[:, 2:3] * on[:, None]], -1)
        per_row = (err**2 if loss == "mse" else err.abs()).mean(-1) + F.binary_cross_entropy_with_logits(raw[:, 3], on, reduction="none")
    else:
        err = net.squash(raw.float(), driven=False) - batch["actions"].float()
        per_row = (err**2 if loss == "mse" else err.abs()).mean(-1)
    if net.config.action_space == "continuous":
        pred = net.squash(raw.float())
        correct = action_classes(pred.detach()) == batch["classes"]
    if weights is not None:
        per_row = per_row * weights[batch["classes"]]
    return per_row, correct


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
    frame gaps left to the recipe (None) as it gives them for the head and the action space."""
    cfg = replace(cfg, **frame_gaps(cfg.head, demos.action_space == "continuous", cfg.stride_jitter, cfg.regular_share))
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
        elif sub.exists() and any(sub.iterdir()):
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
    task = CarRacingTask(cfg, demos, resume)
    return fit(task, cfg, dist_info, device, resume, quiet, restart_best)


class CarRacingTask:
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
            batch["frames"] = augment(batch["frames"], chunk, self.augment, np.random.default_rng([self.seed, epoch, b, 2]))
        return batch

    def loss(self, model: nn.Module, batch: dict[str, Tensor], device: torch.device) -> tuple[Tensor, dict[str, Tensor]]:
        raw = model(batch["frames"], batch["timestamps"], batch["index"])
        per_row, correct = loss_terms(self.net, raw, batch, self._loss_weights(device), self.loss_kind)
        return per_row.mean(), {"acc": correct.float().mean()}

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


def closed_loop_return(net: DrivingNet, seeds: list[int], max_steps: int, share: Dist = Dist(),
                       device: torch.device | None = None) -> float:
    """Mean return of the network driving CarRacing on these seeds (one environment at a time: a few episodes per
    validation need no worker pool); under torchrun each process drives every world-th seed and the returns are
    added up (device: where the processes add them)."""
    was_training = net.training
    policy = DrivingPolicy(net)  # puts the net in eval mode
    total = 0.0
    for seed in seeds[share.rank :: share.world]:
        policy.reset(seed)
        env = make_env(net.config.action_space == "continuous", max_steps)
        try:
            total += run_episode(env, policy, seed).episode_return
        finally:
            env.close()
    net.train(was_training)
    return summed(share, [total], device or torch.device("cpu"))[0] / len(seeds)


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
