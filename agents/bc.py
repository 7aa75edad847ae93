"""Behaviour cloning of a driving network on windows of demonstration frames.

A run folder holds everything: config.json (the network and the training config, resolved),
best.safetensors and last.safetensors (weights), metrics.json, TensorBoard events in tb/, and
train_state.* (weights, optimizer and counters) from which --resume continues. Checkpoints hold
no pickles: tensors in safetensors, everything else in JSON.

Batches are made of chunks of consecutive labelled steps: their windows overlap, so each
distinct frame is encoded once per batch (a chunk of 8 steps with windows of 8 frames needs 15
frames, not 64). The order of an epoch is a function of (seed, epoch) and dropout is seeded per
step, so a resumed run takes the same steps as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm import tqdm

from agents.policy import resolve_device
from datasets.demos import DataError, DemoSet, Episode
from datasets.windows import FrameStore, FrameWindows, kfold_by_episode, split_by_episode
from nac.driving import DrivingNet, DrivingNetConfig
from nac.layer import ConfigError, _need

BALANCE = ("weights", "sampler", "none")
CLASSES = ("noop", "right", "left", "gas", "brake")  # what a step does, in either action space
STATE = "train_state"


@dataclass
class TrainConfig:
    """Behaviour cloning of one driving network (`nacdrive train`)."""

    data: list[str]  # demonstration folders (nacdrive collect; DAgger adds its own)
    out: str  # the run folder
    head: str = "nac"  # sequence head (nac.heads.head_names())
    window: int = 8  # frames per window, labelled with the expert's action at the last one
    frame_stride: int = 1  # steps between a window's frames
    epochs: int | None = None  # passes over the training windows; None: 10, or no limit with minutes
    minutes: float | None = None  # stop after this much training time (summed over resumed sessions)
    batch_size: int = 32  # labelled windows per step (the paper's 32)
    lr: float = 1e-4  # Adam learning rate (the paper's 1e-4)
    chunk: int = 8  # consecutive labelled steps per group in a batch (they share frames)
    balance: str = "weights"  # class imbalance: "weights" (weighted loss), "sampler", "none"
    val_fraction: float = 0.2  # share of episodes held out for validation
    val_episodes: list[str] | None = None  # the held-out episodes ("folder:seed"); resolved at start
    folds: int = 1  # > 1: k-fold cross-validation by episode, one sub-run per fold
    device: str = "auto"  # auto (cuda when present), cpu, cuda, cuda:N
    seed: int = 0  # order of batches, dropout, initial weights, split
    net: dict[str, Any] = field(default_factory=dict)  # more DrivingNetConfig options (d_model, nac, ...)
    checkpoint_seconds: float = 60.0  # how often the resumable state is written
    init_from: str | None = None  # start from this run's best weights (must be the same network)

    def __post_init__(self) -> None:
        _need(bool(self.data), "give at least one demonstration folder (--data)")
        _need(len(set(map(os.path.abspath, self.data))) == len(self.data), "a demonstration folder is given twice")
        _need(self.epochs is None or self.epochs >= 1, f"epochs must be >= 1 (got {self.epochs})")
        _need(self.minutes is None or self.minutes > 0, f"minutes must be > 0 (got {self.minutes})")
        _need(self.batch_size >= 1, f"batch size must be >= 1 (got {self.batch_size})")
        _need(self.lr > 0, f"learning rate must be > 0 (got {self.lr})")
        _need(self.chunk >= 1, f"chunk must be >= 1 (got {self.chunk})")
        _need(self.balance in BALANCE, f"balance must be one of {', '.join(BALANCE)} (got {self.balance!r})")
        _need(0 < self.val_fraction < 1, f"validation fraction must be between 0 and 1 (got {self.val_fraction})")
        _need(self.folds >= 1, f"folds must be >= 1 (got {self.folds})")
        _need(self.checkpoint_seconds > 0, "checkpoint_seconds must be > 0")

    @property
    def max_epochs(self) -> float:
        if self.epochs is not None:
            return self.epochs
        return math.inf if self.minutes is not None else 10

    def net_config(self, action_space: str) -> DrivingNetConfig:
        return DrivingNetConfig.from_dict(
            {**self.net, "head": self.head, "window": self.window, "frame_stride": self.frame_stride, "action_space": action_space}
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# ---------------------------------------------------------------------- data
def action_classes(actions: np.ndarray) -> np.ndarray:
    """(N,) class index into CLASSES of each action: the discrete action itself, or what a
    continuous (steer, gas, brake) does most (brake over steering over gas)."""
    if actions.ndim == 1:
        return actions.astype(np.int64)
    steer, gas, brake = actions[:, 0], actions[:, 1], actions[:, 2]
    cls = np.full(len(actions), 0, dtype=np.int64)
    cls[gas > 0.1] = 3
    cls[steer < -0.1] = 2  # CarRacing: negative steer turns left
    cls[steer > 0.1] = 1
    cls[brake > 0.1] = 4
    return cls


@dataclass
class Demos:
    """Every episode of the given folders, keyed "folder:seed"."""

    action_space: str
    episodes: dict[str, Episode]

    @classmethod
    def load(cls, folders: list[str]) -> "Demos":
        sets = [DemoSet(f) for f in folders]
        spaces = {s.manifest.get("action_space") for s in sets}
        if len(spaces) != 1:
            raise DataError(f"the demonstration folders mix action spaces ({', '.join(sorted(map(str, spaces)))}); train on one")
        episodes: dict[str, Episode] = {}
        for s in sets:
            if not s.episodes:
                raise DataError(f"{s.dir} holds no episodes yet; record some with 'nacdrive collect'")
            for ep in tqdm(s.load(), desc=f"loading {s.dir.name}", unit="ep", leave=False):
                episodes[f"{s.dir.name}:{ep.seed}"] = ep
        return cls(spaces.pop(), episodes)

    def store(self, keys: list[str]) -> FrameStore:
        return FrameStore([self.episodes[k] for k in keys])


class Batches:
    """Chunks of consecutive steps of a store, in an order fixed by (seed, epoch)."""

    def __init__(self, windows: FrameWindows, chunk: int, batch_size: int, row_weights: np.ndarray | None) -> None:
        s = windows.store
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

    def batch(self, rows: np.ndarray, device: torch.device) -> dict[str, Tensor]:
        """Distinct frames of the rows' windows, the index of each window into them, times, labels."""
        s = self.windows.store
        idx, _ = self.windows.indices(rows)  # (n, W) frame rows
        uniq, inverse = np.unique(idx, return_inverse=True)
        return {
            "frames": torch.from_numpy(s.frames[uniq]).to(device, non_blocking=True),  # (U, H, W, 3)
            "index": torch.from_numpy(inverse.reshape(idx.shape)).to(device),  # (n, W)
            "timestamps": torch.from_numpy(s.timestamps[idx]).float().to(device),  # (n, W)
            "actions": torch.from_numpy(s.actions[rows]).to(device),  # (n,) or (n, 3)
            "classes": torch.from_numpy(action_classes(s.actions[rows])).to(device),  # (n,)
        }


def class_weights(classes: np.ndarray) -> np.ndarray:
    """Inverse-frequency weights over CLASSES, normalized to a mean of 1 over the rows; classes
    never seen get weight 0."""
    counts = np.bincount(classes, minlength=len(CLASSES)).astype(np.float64)
    w = np.where(counts > 0, counts.sum() / np.maximum(counts, 1) / max(1, (counts > 0).sum()), 0.0)
    return w


# ---------------------------------------------------------------------- loss and metrics
def loss_terms(net: DrivingNet, raw: Tensor, batch: dict[str, Tensor], weights: Tensor | None) -> tuple[Tensor, Tensor]:
    """Per-row loss (n,) and per-row correct-class flag (n,)."""
    if net.config.action_space == "discrete":
        labels = batch["actions"].long()
        per_row = F.cross_entropy(raw.float(), labels, reduction="none")
        correct = raw.argmax(-1) == labels
    else:
        pred = net.squash(raw.float())
        per_row = ((pred - batch["actions"].float()) ** 2).mean(-1)
        pred_cls = torch.from_numpy(action_classes(pred.detach().cpu().numpy())).to(raw.device)
        correct = pred_cls == batch["classes"]
    if weights is not None:
        per_row = per_row * weights[batch["classes"]]
    return per_row, correct


@torch.no_grad()
def validate(net: DrivingNet, windows: FrameWindows, device: torch.device, batch_rows: int = 512) -> dict[str, float]:
    """Loss (unweighted) and accuracy over every window of the validation episodes; each frame
    is encoded once."""
    was_training = net.training
    net.eval()
    s = windows.store
    feats = torch.cat([net.encode(torch.from_numpy(s.frames[i : i + 256]).to(device)).float() for i in range(0, len(s), 256)])
    losses, correct, steer_err = [], [], []
    for i in range(0, len(s), batch_rows):
        rows = np.arange(i, min(len(s), i + batch_rows))
        idx, _ = windows.indices(rows)
        batch = {
            "actions": torch.from_numpy(s.actions[rows]).to(device),
            "classes": torch.from_numpy(action_classes(s.actions[rows])).to(device),
        }
        raw = net.decide(feats[torch.from_numpy(idx).to(device)], torch.from_numpy(s.timestamps[idx]).float().to(device))
        per_row, ok = loss_terms(net, raw, batch, None)
        losses.append(per_row.cpu())
        correct.append(ok.cpu())
        if net.config.action_space == "continuous":
            steer_err.append((net.squash(raw.float())[:, 0] - batch["actions"][:, 0].float()).abs().cpu())
    net.train(was_training)
    out = {"val_loss": float(torch.cat(losses).mean()), "val_accuracy": float(torch.cat(correct).float().mean())}
    if steer_err:
        out["val_steer_mae"] = float(torch.cat(steer_err).mean())
    return out


# ---------------------------------------------------------------------- resumable state
def _save_state(run: Path, net: nn.Module, opt: torch.optim.Optimizer, counters: dict[str, Any]) -> None:
    """Weights + optimizer tensors in alternating safetensors files, then the JSON that names
    the newer one: an interruption at any point leaves one consistent state."""
    slot = 1 - counters.get("slot", 1)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    opt_state = opt.state_dict()
    for pid, st in opt_state["state"].items():
        for name, value in st.items():
            tensors[f"opt.{pid}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    tmp = run / f".{STATE}.{slot}.tmp"
    save_file(tensors, str(tmp))
    tmp.replace(run / f"{STATE}.{slot}.safetensors")
    counters = {**counters, "slot": slot, "param_groups": opt_state["param_groups"]}
    _write_json(run / f"{STATE}.json", counters)


def _load_state(run: Path, net: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    counters = json.loads((run / f"{STATE}.json").read_text())
    tensors = load_file(str(run / f"{STATE}.{counters['slot']}.safetensors"))
    net.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict[int, dict[str, Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": counters["param_groups"]})
    return counters


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


# ---------------------------------------------------------------------- distributed (torchrun)
@dataclass
class _Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_distributed(device: torch.device) -> tuple[_Dist, torch.device]:
    """Under torchrun (WORLD_SIZE > 1): one process per GPU (or CPU process with gloo)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist(), device
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    return _Dist(dist.get_rank(), dist.get_world_size()), device


def _barrier(d: _Dist) -> None:
    if d.world > 1:
        import torch.distributed as dist

        dist.barrier()


def _any(d: _Dist, flag: bool, device: torch.device) -> bool:
    """True when any process says so (processes must stop at the same step under DDP)."""
    if d.world <= 1:
        return flag
    import torch.distributed as dist

    t = torch.tensor([float(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


# ---------------------------------------------------------------------- training
def _resolve(cfg: TrainConfig, demos: Demos, fold_split: tuple[list[str], list[str]] | None) -> TrainConfig:
    if cfg.val_episodes is None:
        keys = sorted(demos.episodes)
        val = fold_split[1] if fold_split else split_by_episode(keys, cfg.val_fraction, cfg.seed)[1]
        cfg = TrainConfig.from_dict({**asdict(cfg), "val_episodes": list(val)})
    missing = [k for k in cfg.val_episodes or [] if k not in demos.episodes]
    if missing:
        raise DataError(f"validation episodes {missing[:3]} are not in the data folders {cfg.data}")
    return cfg


def prepare_run(cfg: TrainConfig, resume: bool) -> TrainConfig:
    """Refuse to overwrite a run; on resume, the saved config (with the given budget) wins."""
    run = Path(cfg.out)
    saved = run / "config.json"
    if resume:
        if not saved.is_file():
            raise ConfigError(f"nothing to resume in {run}: it holds no training run")
        data = json.loads(saved.read_text())
        if data.get("task") != "carracing" or "train" not in data:
            raise ConfigError(f"{run} is not a CarRacing training run; cannot resume it")
        old = TrainConfig.from_dict(data["train"])
        return TrainConfig.from_dict({**asdict(old), "epochs": cfg.epochs or old.epochs, "minutes": cfg.minutes or old.minutes})
    if run.exists() and any(run.iterdir()):
        raise ConfigError(f"{run} is not empty; use --resume to continue the run there, or another --out")
    return cfg


def train(cfg: TrainConfig, resume: bool = False, quiet: bool = False, restart_best: bool = False) -> dict[str, Any]:
    """Train (or resume) a run; k-fold when cfg.folds > 1. Returns the run's metrics.
    restart_best: on resume, "best" is chosen among the checkpoints from here on."""
    cfg = prepare_run(cfg, resume)
    if cfg.folds > 1:
        return _train_folds(cfg, resume, quiet)
    return _train_one(cfg, Demos.load(cfg.data), None, resume, quiet, restart_best)


def _train_folds(cfg: TrainConfig, resume: bool, quiet: bool) -> dict[str, Any]:
    demos = Demos.load(cfg.data)
    splits = kfold_by_episode(sorted(demos.episodes), cfg.folds, cfg.seed)
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    results = []
    for k, split in enumerate(splits):
        sub = run / f"fold{k}"
        fold_cfg = TrainConfig.from_dict({**asdict(cfg), "out": str(sub), "folds": 1, "val_episodes": None})
        again = resume and (sub / "config.json").is_file()
        if again:
            fold_cfg = prepare_run(fold_cfg, True)
        elif sub.exists() and any(sub.iterdir()):
            raise ConfigError(f"{sub} is not empty; use --resume")
        results.append(_train_one(fold_cfg, demos, split, again, quiet))
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
    _write_json(run / "metrics.json", summary)
    return summary


def _train_one(
    cfg: TrainConfig, demos: Demos, fold_split: tuple[list[str], list[str]] | None, resume: bool, quiet: bool, restart_best: bool = False
) -> dict[str, Any]:
    cfg = _resolve(cfg, demos, fold_split)
    run = Path(cfg.out)
    dist_info, device = _init_distributed(resolve_device(cfg.device))
    net_cfg = cfg.net_config(demos.action_space)
    val_keys = list(cfg.val_episodes or [])
    train_keys = sorted(k for k in demos.episodes if k not in set(val_keys))
    if not train_keys or not val_keys:
        raise DataError("training needs episodes on both sides of the split: record more episodes")
    train_windows = FrameWindows(demos.store(train_keys), net_cfg.window, net_cfg.frame_stride)
    val_windows = FrameWindows(demos.store(val_keys), net_cfg.window, net_cfg.frame_stride)

    torch.manual_seed(cfg.seed)
    net = DrivingNet(net_cfg)
    if cfg.init_from and not resume:
        from agents.policy import load_run  # the same checkpoint reader the policy uses

        init = load_run(cfg.init_from, "best")
        if init.config != net_cfg:
            raise ConfigError(f"--init-from {cfg.init_from} is a different network ({init.config.head}, window {init.config.window})")
        net.load_state_dict(init.state_dict())
    net.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    model: nn.Module = net
    if dist_info.world > 1:
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)

    classes = action_classes(train_windows.store.actions)
    cw = class_weights(classes)
    weights = torch.tensor(cw, dtype=torch.float32, device=device) if cfg.balance == "weights" else None
    batches = Batches(train_windows, cfg.chunk, cfg.batch_size, cw[classes] if cfg.balance == "sampler" else None)
    amp = device.type == "cuda"  # mixed precision on GPUs; CPUs train in float32
    scaler = torch.amp.GradScaler("cuda", enabled=amp)

    extra = {"train": asdict(cfg), "data": _data_summary(demos, train_keys, val_keys)}
    counters: dict[str, Any] = {"epoch": 0, "batch": 0, "step": 0, "seconds": 0.0, "best_val_loss": None, "done": False}
    history: list[dict[str, Any]] = []
    if resume and (run / f"{STATE}.json").is_file():
        counters = _load_state(run, net, opt)
        history = json.loads((run / "metrics.json").read_text()).get("history", []) if (run / "metrics.json").is_file() else []
        counters["done"] = False  # a larger budget may have been given
        if restart_best:
            counters["best_val_loss"] = None
            counters["best_from_step"] = counters["step"]
    elif dist_info.main:
        run.mkdir(parents=True, exist_ok=True)
        net.save(run, "last", extra)  # config.json from the start: the run is identifiable

    writer = None
    if dist_info.main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run / "tb"))

    def out_of_budget() -> bool:
        return counters["epoch"] >= cfg.max_epochs or (cfg.minutes is not None and counters["seconds"] >= cfg.minutes * 60)

    def checkpoint() -> None:
        if dist_info.main:
            _save_state(run, net, opt, counters)

    def end_of_period() -> None:
        """Validate, keep the best weights, write metrics."""
        if dist_info.main:
            metrics = validate(net, val_windows, device)
            row = {"epoch": counters["epoch"], "batch": counters["batch"], "step": counters["step"], "seconds": round(counters["seconds"], 1), **metrics}
            history.append(row)
            if writer is not None:
                for k, v in metrics.items():
                    writer.add_scalar(f"val/{k[4:]}", v, counters["step"])
            best = counters["best_val_loss"]
            if best is None or metrics["val_loss"] < best:
                counters["best_val_loss"] = metrics["val_loss"]
                net.save(run, "best", extra)
            net.save(run, "last", extra)
            _write_metrics(run, cfg, history, counters)
            checkpoint()
        _barrier(dist_info)

    # Deterministic kernels (the gather of shared frames accumulates its gradient in a
    # thread-dependent order otherwise): a resumed run then matches an uninterrupted one bit
    # for bit on the same machine.
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    started = time.monotonic() - counters["seconds"]
    last_ckpt = time.monotonic()
    net.train()
    try:
        while not out_of_budget():
            order = batches.order(cfg.seed, counters["epoch"])
            n_batches = len(batches)
            usable = n_batches - n_batches % dist_info.world  # every process takes as many steps
            bar = tqdm(
                total=n_batches, initial=counters["batch"], desc=f"{net_cfg.head} epoch {counters['epoch'] + 1}",
                unit="batch", dynamic_ncols=True, disable=quiet or not dist_info.main, leave=False,
            )
            loss_avg = acc_avg = None
            while counters["batch"] < n_batches:
                b = counters["batch"]
                if b % dist_info.world != dist_info.rank or b >= usable:  # each process takes its share
                    counters["batch"] += 1
                    continue
                chunks = order[b * batches.per_batch : (b + 1) * batches.per_batch]
                batch = batches.batch(batches.rows(chunks), device)
                torch.manual_seed(cfg.seed * 1_000_003 + counters["step"])  # dropout, reproducible on resume
                with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
                    raw = model(batch["frames"], batch["timestamps"], batch["index"])
                per_row, correct = loss_terms(net, raw, batch, weights)
                loss = per_row.mean()
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                counters["batch"] += 1  # only now: an interruption before this point redoes the batch
                counters["step"] += 1
                counters["seconds"] = time.monotonic() - started
                loss_v, acc_v = float(loss.detach()), float(correct.float().mean())
                loss_avg = loss_v if loss_avg is None else 0.98 * loss_avg + 0.02 * loss_v
                acc_avg = acc_v if acc_avg is None else 0.98 * acc_avg + 0.02 * acc_v
                bar.update(dist_info.world)
                bar.set_postfix(loss=f"{loss_avg:.3f}", acc=f"{acc_avg:.2f}")
                if writer is not None and counters["step"] % 20 == 0:
                    writer.add_scalar("train/loss", loss_avg, counters["step"])
                    writer.add_scalar("train/accuracy", acc_avg, counters["step"])
                if time.monotonic() - last_ckpt > cfg.checkpoint_seconds:
                    checkpoint()
                    last_ckpt = time.monotonic()
                if _any(dist_info, cfg.minutes is not None and counters["seconds"] >= cfg.minutes * 60, device):
                    break
            bar.close()
            if counters["batch"] >= n_batches:
                counters["epoch"] += 1
                counters["batch"] = 0
            end_of_period()
    except KeyboardInterrupt:
        counters["seconds"] = time.monotonic() - started
        checkpoint()
        raise KeyboardInterrupt(f"training interrupted at step {counters['step']}; 'nacdrive train --out {run} --resume' continues") from None
    finally:
        torch.use_deterministic_algorithms(deterministic)
        if writer is not None:
            writer.close()
    counters["done"] = True
    checkpoint()
    metrics = _write_metrics(run, cfg, history, counters) if dist_info.main else {}
    _barrier(dist_info)
    return metrics


def _data_summary(demos: Demos, train_keys: list[str], val_keys: list[str]) -> dict[str, Any]:
    frames = {k: len(e) for k, e in demos.episodes.items()}
    return {
        "action_space": demos.action_space,
        "train_episodes": len(train_keys),
        "train_frames": sum(frames[k] for k in train_keys),
        "val_episodes": len(val_keys),
        "val_frames": sum(frames[k] for k in val_keys),
        "episodes": sorted(train_keys + val_keys),  # evaluation refuses these seeds
    }


def _write_metrics(run: Path, cfg: TrainConfig, history: list[dict[str, Any]], counters: dict[str, Any]) -> dict[str, Any]:
    since = [r for r in history if r["step"] > counters.get("best_from_step", -1)]
    best = min(since, key=lambda r: r["val_loss"]) if since else None
    metrics = {
        "run": str(run),
        "head": cfg.head,
        "best": best,
        "last": history[-1] if history else None,
        "steps": counters["step"],
        "epochs": counters["epoch"],
        "train_seconds": round(counters["seconds"], 1),
        "finished": bool(counters.get("done")),
        "history": history,
    }
    _write_json(run / "metrics.json", metrics)
    return metrics
