"""The training loop every task shares: devices (CPU / CUDA, mixed precision on CUDA, torchrun
DistributedDataParallel), a time or epoch budget, validation and best / last weights, TensorBoard,
progress bars, and a resumable state.

A run folder holds config.json (the network and the training config, resolved),
best.safetensors and last.safetensors (weights), metrics.json, TensorBoard events in tb/, and
train_state.* (weights, optimizer and counters) from which --resume continues. Checkpoints hold
no pickles: tensors in safetensors, everything else in JSON. The order of an epoch is a function
of (seed, epoch) and dropout is seeded per step, so a resumed run takes the same steps as an
uninterrupted one.

The loop knows no task: a Trainable (agents.training.bc's CarRacing windows, agents.training.udacity's PilotNet) is
built by its task's trainer and handed to `fit`; `agents.training.trainers.train` picks the trainer by the task's
name (TASKS). A Trainable supplies the network and its data: `net` (with save()), `label`, `extra` (what goes into
config.json), `batches_per_epoch()`, `batch(epoch, b, device)` (a function of (epoch, b) alone: the loop prepares batches
ahead, in a thread of its own), `loss(model, batch, device)` -> (mean loss, progress figures, both tensors left on
the device), and `validate(device, share)` -> figures including "val_loss" (under torchrun every process
validates its share and gets the figures of the whole).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Protocol

import numpy as np

import torch
from safetensors.torch import save_file
from torch import Tensor, nn
from tqdm import tqdm

from agents.training.augment import AUGMENTS, check_augment
from agents.training.distributed import Dist, any_process, barrier
from agents.carracing.env import EPISODE_STEPS
from nac.checkpoint import holds_anything, read_json, read_weights, replace_file, write_json
from nac.config import ConfigDict, ConfigError, TrainingDiverged, above, at_least, between, check_ranges, need
from nac.heads import head_names
from nac.pilotnet import DENSE

TASKS = ("carracing", "udacity")  # what a run learns (TrainConfig.task); each one's trainer is in agents.training.trainers
BALANCE = ("auto", "weights", "sampler", "none")
LOSSES = ("mse", "l1")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
STATE = "train_state"
LOG_EVERY = 20  # steps between the loop's reads of the device: progress figures, TensorBoard, the checks for a loss that is
# not finite and for the time budget, and the resumable state; in between, a step reads nothing back from the device
# Deterministic cuBLAS on CUDA (PyTorch's reproducibility notes): read when cuBLAS starts, so set on import, before the
# first matrix product of the process; the loop asks for deterministic kernels (fit) and this is the half CUDA needs
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# epochs when none are given: CarRacing's behaviour cloning of the recipe (4, before DAgger adds its rounds), PilotNet's 10
DEFAULT_EPOCHS = {"carracing": 4, "udacity": 10}


@dataclass
class CloningRecipe(ConfigDict):
    """How behaviour cloning trains: the recipe's part of a training run (agents.training.recipe.Recipe holds one; TrainConfig
    is one, with the run's data, folders and hardware). The CarRacing-only fields say so."""

    WHAT = "behaviour-cloning fields"

    epochs: int | None = field(default=None, metadata=at_least(1))  # passes over the training data (default: carracing 4, udacity 10; no limit with minutes)
    minutes: float | None = field(default=None, metadata=above(0))  # stop after this much training time (summed over resumed sessions; a cap makes the result
    # depend on the machine's speed)
    window: int = field(default=8, metadata=at_least(1))  # carracing: frames per window, labelled with the expert's action at the last one
    stride_jitter: int | None = field(default=None, metadata=at_least(1))  # carracing: > 1 draws each gap between a window's frames from 1..J steps (true timestamps
    # kept), so that heads told the frames' times learn the timing of dropped or late frames. Default: the recipe's for the
    # action space (agents.training.bc.frame_gaps: 3 for every head with continuous actions, else 1)
    regular_share: float | None = field(default=None, metadata=between(0, 1))  # carracing, with stride_jitter > 1: this share of windows keeps regular gaps (default: the
    # recipe's, 0.5 where the jitter is 3 by default, else 0)
    arrival_windows: bool = False  # carracing: a step a policy decided on in a perturbed DAgger rollout ('dagger --perturb') is
    # trained on the window it saw there, with the gaps its frames really came at, instead of gaps drawn afresh (needs frame_stride 1)
    shift: int = field(default=0, metadata=between(0, 16))  # carracing: random image shifts of up to this many pixels, the same for a chunk of steps (DrQ / RAD)
    augment: str = field(default="none", metadata={"metavar": "|".join(AUGMENTS)})  # carracing: an augmentation against visual
    # shift, drawn per chunk of steps on half of them, above the instrument strip: jitter (brightness, contrast, saturation, hue),
    # randconv (a random 3x3 convolution, Lee et al. 2020), randmix (the same mixed with the identity by a random share, as
    # RandConv), colour (a random affine colour map of the whole scene), overlay (blended with a random 1/f picture, as SODA /
    # SVEA), natural (the same blend with a crop of a photograph none of the photos scene's), patch (those crops at full strength
    # under a smooth random mask), invert (the scene turned over, 1 - x, in half the chunks it is given); several joined by '+'
    # are applied in turn (agents.training.augment)
    consistency: float = 0.0  # carracing, with an augmentation: > 0 trains every window on a clean and an augmented view (every
    # chunk augmented), the expert's label on both, plus this weight x the squared distance between each frame's features in
    # the two views over the clean features' variance, the clean ones held fixed (Lee et al. 2020's feature matching, made
    # scale-free: agents.training.bc.feature_match; SVEA trains on both views)
    select_episodes: int = 0  # carracing: > 0 keeps as best the weights that drive best over this many closed-loop episodes
    # (selection seeds, the same at every validation) instead of those with the lowest validation loss
    lr: float = field(default=1e-4, metadata=above(0))  # Adam's learning rate, the paper's 1e-4
    ema: float = field(default=0.0, metadata=between(0, 1, hi_open=True))  # > 0: validate and save an exponential moving average of the weights, this decay per step (0.999: a
    # half-life of about 700 steps); the optimizer still steps the raw weights
    batch_size: int = field(default=32, metadata=at_least(1))  # windows (carracing) or images (udacity) per step, the paper's 32
    loss: str = field(default="mse", metadata={"choices": LOSSES})  # carracing, continuous actions: squared error (the conditional
    # mean) or absolute error (the conditional median: no constant small brake where the expert brakes in rare pulses)
    balance: str = field(default="auto", metadata={"choices": BALANCE})  # carracing: class imbalance by a weighted loss (weights),
    # balanced sampling (sampler) or neither (none); auto: weights for discrete actions, none for continuous ones (reweighting
    # a regression by action class biases the mean action)
    turn_weight: float = 0.0  # carracing, wheel-angle networks (net wheel_target): the angle's squared error weighted by 1 + W x how
    # fast the expert's planned angle turns there (0 on a straight or a steady bend, about 0.35 where a bend turns into the other way)
    val_fraction: float = field(default=0.2, metadata=between(0, 1, lo_open=True, hi_open=True))  # share of episodes (carracing) or sessions (udacity) held out for validation
    net: dict[str, Any] = field(default_factory=dict)  # network options (nac.driving.DrivingNetConfig, nac.pilotnet.PilotNetConfig),
    # e.g. {"use_time": false, "nac": {"mode": "euler"}}

    def __post_init__(self) -> None:
        check_ranges(self)
        check_augment(self.augment)
        need(not self.consistency or self.augment != "none", "consistency compares a clean and an augmented view: give --augment too")
        need(self.balance in BALANCE, f"balance must be one of {', '.join(BALANCE)} (got {self.balance!r})")
        need(self.loss in LOSSES, f"loss must be one of {', '.join(LOSSES)} (got {self.loss!r})")
        need(isinstance(self.net, dict), "net must be a JSON object of network options")
        need(not self.turn_weight or bool(self.net.get("wheel_target")),
             "turn weight weights the wheel angle's error: it is for wheel-angle networks (--wheel-target, net.wheel_target)")


@dataclass(kw_only=True)
class TrainConfig(CloningRecipe):
    """Training of one policy network (`nacdrive train`): a behaviour-cloning recipe (CloningRecipe's fields), on these
    demonstrations, into this run folder, on this hardware."""

    data: list[str]  # demonstration folders from 'nacdrive collect' (carracing), or recording folders with driving_log.csv (udacity)
    out: str  # the run folder to create (or to continue with --resume)
    task: str = field(default="carracing", metadata={"choices": TASKS})  # carracing: frame windows -> the expert's actions;
    # udacity: PilotNet's steering from driving_log.csv recordings (split by session; side cameras, flips, shifts, shadows and
    # brightness as augmentation)
    head: str = field(default="nac", metadata={"choices": lambda: [*head_names(), DENSE]})  # the sequence head (nac.heads);
    # dense: PilotNet's own dense layers (udacity only)
    frame_stride: int = field(default=1, metadata=at_least(1))  # carracing: steps between a window's frames
    select_steps: int = field(default=EPISODE_STEPS, metadata=at_least(1))  # carracing: steps per selection episode
    chunk: int = field(default=8, metadata=at_least(1))  # carracing: consecutive steps per group in a batch, sharing their frames
    val_episodes: list[str] | None = None  # carracing: the held-out episodes ("folder:seed"); drawn at start, saved in the run
    folds: int = field(default=1, metadata=at_least(1))  # carracing: > 1 is k-fold cross-validation by episode, one sub-run per fold
    device: str = "auto"  # auto (cuda when present), cpu, cuda, cuda:N
    prefetch: int = 2  # batches prepared ahead of the step, in a thread of their own (0: each when the step asks for it);
    # their host memory pinned where the device is a GPU
    precision: str = field(default="auto", metadata={"choices": PRECISIONS})  # the training step's arithmetic: auto (fp16 on
    # CUDA, fp32 on CPU), fp32, bf16 (autocast to bfloat16, no loss scaling; CPUs too) or fp16 (autocast to float16 with a
    # loss scaler, whose state the resumable checkpoint keeps)
    seed: int = 0  # seed of the split, the initial weights, the batch order, dropout and augmentation
    checkpoint_seconds: float = field(default=60.0, metadata=above(0))  # how often the resumable state is written
    init_from: str | None = None  # carracing: start from this run's best weights (the same network)

    def __post_init__(self) -> None:
        check_ranges(self)
        super().__post_init__()
        need(self.task in TASKS, f"task must be one of {', '.join(TASKS)} (got {self.task!r})")
        need(bool(self.data), "give at least one data folder (--data)")
        need(len(set(map(os.path.abspath, self.data))) == len(self.data), "a data folder is given twice")
        need(not self.arrival_windows or self.frame_stride == 1,
             f"--arrival-windows cuts the windows a policy saw step by step, so it needs --frame-stride 1 (got {self.frame_stride})")
        need(self.folds == 1 or self.task == "carracing", "--folds is for the carracing task")
        need(self.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")

    @property
    def max_epochs(self) -> float:
        if self.epochs is not None:
            return self.epochs
        return math.inf if self.minutes is not None else DEFAULT_EPOCHS[self.task]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def moved_to(self, run: str | Path) -> "TrainConfig":
        """This saved config for the run now in `run`, wherever it was trained.

        A run's config keeps its folders as training was given them, often relative to another working directory. A
        data folder inside the old run folder is the run's own (DAgger's rollouts) and follows it; one outside it keeps its
        path while that is a folder, and else is looked for where it lay beside the old run folder (a quick start's
        folder copied whole, demonstrations and run together). A copied run once trained on its original's rollouts,
        and a moved quick start on a demonstrations path that no longer resolved."""
        old, new = Path(os.path.abspath(self.out)), Path(run)
        data = []
        for d in self.data:
            rel = Path(os.path.relpath(os.path.abspath(d), old))
            inside = not rel.parts or rel.parts[0] != ".."
            if inside:  # spelt as the caller spells the run folder (dagger finds its rollouts in the list by run / "dagger")
                data.append(str(new / rel))
                continue
            moved = Path(os.path.normpath(new / rel))  # copy/run/../demos -> copy/demos
            data.append(str(moved) if not Path(d).is_dir() and moved.is_dir() else d)
        return TrainConfig.from_dict({**asdict(self), "out": str(new), "data": list(dict.fromkeys(data))})


class Trainable(Protocol):
    net: nn.Module
    label: str
    extra: dict[str, Any]

    def batches_per_epoch(self) -> int: ...

    def batch(self, epoch: int, b: int, device: torch.device) -> dict[str, Tensor]: ...

    def loss(self, model: nn.Module, batch: dict[str, Tensor], device: torch.device) -> tuple[Tensor, dict[str, Tensor]]: ...

    def validate(self, device: torch.device, share: Dist) -> dict[str, float]: ...


# ---------------------------------------------------------------------- resumable state
def _save_state(run: Path, net: nn.Module, opt: torch.optim.Optimizer, counters: dict[str, Any], ema: nn.Module | None = None) -> int:
    """Weights (and their moving average) + optimizer tensors in alternating safetensors files,
    then the JSON that names the newer one: an interruption at any point leaves one consistent state.
    Returns the slot written, which the caller keeps so that the next state goes to the other file."""
    slot = 1 - counters.get("slot", 1)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v.detach().cpu().contiguous() for k, v in ema.state_dict().items()})
    opt_state = opt.state_dict()
    for pid, st in opt_state["state"].items():
        for name, value in st.items():
            tensors[f"opt.{pid}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    tmp = run / f".{STATE}.{slot}.tmp"
    save_file(tensors, str(tmp))
    replace_file(tmp, run / f"{STATE}.{slot}.safetensors", "training state")
    counters = {**counters, "slot": slot, "param_groups": opt_state["param_groups"]}
    write_json(run / f"{STATE}.json", counters)
    return slot


def _load_state(run: Path, net: nn.Module, opt: torch.optim.Optimizer, ema: nn.Module | None = None) -> dict[str, Any]:
    counters = read_json(run / f"{STATE}.json")
    tensors = read_weights(run / f"{STATE}.{counters['slot']}.safetensors")
    net.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if ema is not None:
        averaged = {k[4:]: v for k, v in tensors.items() if k.startswith("ema.")}
        if averaged:  # a state written before the average was asked for starts it from the weights
            ema.load_state_dict(averaged)
    state: dict[int, dict[str, Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": counters["param_groups"]})
    return counters


def prepare_run(cfg: TrainConfig, resume: bool) -> TrainConfig:
    """Refuse to overwrite a run; on resume, the saved config (with the given budget) wins."""
    run = Path(cfg.out)
    if run.exists() and not run.is_dir():
        raise ConfigError(f"{run} is a file, not a folder; give --out a folder for the run")
    saved = run / "config.json"
    if resume:
        if not saved.is_file():
            raise ConfigError(f"nothing to resume in {run}: it holds no training run")
        data = read_json(saved)
        if data.get("task") != cfg.task or "train" not in data:
            raise ConfigError(f"{run} is not a {cfg.task} training run (task {data.get('task')!r}); cannot resume it")
        old = TrainConfig.from_dict(data["train"]).moved_to(run)
        return TrainConfig.from_dict({**asdict(old), "epochs": cfg.epochs or old.epochs, "minutes": cfg.minutes or old.minutes})
    if holds_anything(run):
        raise ConfigError(f"{run} is not empty; use --resume to continue the run there, or another --out")
    return cfg


# ---------------------------------------------------------------------- the step and its batches
def to_device(arrays: dict[str, np.ndarray | Tensor], device: torch.device) -> dict[str, Tensor]:
    """A batch prepared on the host, moved to `device`: through pinned memory where that is a GPU, so that the
    copies leave without waiting (from pageable memory `non_blocking` does nothing)."""
    out = {}
    for k, a in arrays.items():
        t = torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
        if device.type == "cuda":
            t = t.pin_memory()
        out[k] = t.to(device, non_blocking=True)
    return out


def prepared(task: Trainable, epoch: int, batches: list[int], device: torch.device, ahead: int) -> Iterator[tuple[int, dict[str, Tensor], float]]:
    """(b, batch, seconds the caller waited for it) for the batches b of `batches` in order, each prepared up to
    `ahead` batches before it is asked for, in one thread of its own (0: when asked, in the caller's thread). The
    same batches either way: a task's batch is a function of (epoch, b). One thread, not a DataLoader's worker
    processes: a batch is index arithmetic on arrays this process holds (numpy and torch release the GIL for it),
    and the augmentations run on the device."""
    if ahead == 0:
        for b in batches:
            t = time.perf_counter()
            batch = task.batch(epoch, b, device)
            yield b, batch, time.perf_counter() - t
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix="batches")
    todo = iter(batches)
    queue: deque[tuple[int, Future]] = deque()

    def ask() -> None:
        b = next(todo, None)
        if b is not None:
            queue.append((b, pool.submit(task.batch, epoch, b, device)))

    try:
        for _ in range(ahead):
            ask()
        while queue:
            b, future = queue.popleft()
            t = time.perf_counter()
            batch = future.result()
            waited = time.perf_counter() - t
            ask()  # before the step: the next batch is made while this one trains
            yield b, batch, waited
    finally:
        for _, future in queue:
            future.cancel()
        pool.shutdown(wait=True)


class MovingAverage(nn.Module):
    """An exponential moving average of a network's weights and buffers: what torch's AveragedModel keeps with
    get_ema_multi_avg_fn(decay) and use_buffers (the same arithmetic and state_dict, so either's resumable state
    reads), without reading its step count back from the device twice a step as AveragedModel does."""

    def __init__(self, net: nn.Module, decay: float) -> None:
        super().__init__()
        self.module = copy.deepcopy(net)
        self.decay = decay
        device = next(net.parameters()).device
        self.register_buffer("n_averaged", torch.tensor(0, dtype=torch.long, device=device))
        self.started = False  # whether the average holds weights yet (known on the host: set again when a state loads)

    def load_state_dict(self, state_dict: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        out = super().load_state_dict(state_dict, *args, **kwargs)
        self.started = bool(self.n_averaged > 0)
        return out

    @torch.no_grad()
    def update(self, net: nn.Module) -> None:
        mine = [*self.module.parameters(), *self.module.buffers()]
        theirs = [t.detach() for t in (*net.parameters(), *net.buffers())]
        if not self.started:
            torch._foreach_copy_(mine, theirs)
            self.started = True
        else:
            floats = [i for i, t in enumerate(mine) if t.is_floating_point()]
            torch._foreach_lerp_([mine[i] for i in floats], [theirs[i] for i in floats], 1 - self.decay)
            for i in set(range(len(mine))) - set(floats):  # integer buffers, as AveragedModel averages them
                mine[i].copy_(mine[i] * self.decay + theirs[i] * (1 - self.decay))
        self.n_averaged += 1


class Stepper:
    """The training step: the network (wrapped in DistributedDataParallel under torchrun), Adam, the arithmetic
    (autocast, float16's loss scaler) and the moving average of the weights. A step reads nothing back from the
    device: the loss and the progress figures are averaged where they are, and the first step whose loss was not
    finite is noted there; `read()` brings them to the host, which the loop does every LOG_EVERY steps."""

    def __init__(self, task: Trainable, cfg: TrainConfig, dist_info: Dist, device: torch.device) -> None:
        self.task, self.seed, self.dist, self.device = task, cfg.seed, dist_info, device
        self.net = task.net.to(device)
        # fused: one kernel for every parameter's update, and the loss scaler's skip decided on the device; on 2 CPU
        # threads 0.85 ms a step against the default (foreach) 3.8 ms, about 4 % of a driving network's step
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, fused=True)
        self.model: nn.Module = self.net
        if dist_info.world > 1:
            # static_graph: every step uses the same parameters, so DDP learns once which ones get no gradient
            # (nac-const's backbone gates, with no ODE to feed) and skips them, where the default waits for their
            # reduction and fails
            self.model = nn.parallel.DistributedDataParallel(
                self.net, device_ids=[device.index] if device.type == "cuda" else None, static_graph=True)
        precision = cfg.precision if cfg.precision != "auto" else ("fp16" if device.type == "cuda" else "fp32")
        self.precision = precision
        self.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")  # float16's range needs the loss scaled
        self.ema = MovingAverage(self.net, cfg.ema) if cfg.ema else None
        self.avg: dict[str, Tensor] = {}
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)  # the first step whose loss was not finite
        self.bad_loss = torch.zeros((), device=device)  # and its loss
        self.last_loss: Tensor | None = None  # the last step's loss, where it is

    def step(self, batch: dict[str, Tensor], step: int) -> None:
        torch.manual_seed(dropout_seed(self.seed, step, self.dist))  # reproducible on resume
        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None):
            loss, figures = self.task.loss(self.model, batch, self.device)
        value = self.last_loss = loss.detach().float()
        new_bad = ~torch.isfinite(value) & (self.first_bad < 0)
        self.first_bad = torch.where(new_bad, step, self.first_bad)
        self.bad_loss = torch.where(new_bad, value, self.bad_loss)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        if self.ema is not None:
            self.ema.update(self.net)
        for k, v in {"loss": value, **figures}.items():
            v = v.detach().float()
            self.avg[k] = v if k not in self.avg else torch.lerp(self.avg[k], v, 0.02)

    def read(self) -> tuple[dict[str, float], tuple[int, float] | None]:
        """The running averages of the loss and the figures, and (step, loss) of the first step whose loss was not
        finite (None while there is none): one transfer from the device."""
        keys = list(self.avg)
        values = torch.stack([self.first_bad.double(), self.bad_loss.double(), *(self.avg[k].double() for k in keys)]).tolist()
        bad = None if values[0] < 0 else (int(values[0]), values[1])
        return dict(zip(keys, values[2:])), bad


# ---------------------------------------------------------------------- the loop
def dropout_seed(seed: int, step: int, dist_info: Dist) -> int:
    """The seed of a training step's dropout: a stream of its own for every process under torchrun (their
    batches differ, so should their masks), and in one process the same seeds as before there were ranks."""
    return seed * 1_000_003 + step * dist_info.world + dist_info.rank


@contextlib.contextmanager
def deterministic_kernels() -> Iterator[None]:
    """Within: deterministic kernels (a gather whose gradient accumulates in a thread-dependent order otherwise),
    so that a resumed run matches an uninterrupted one bit for bit on one machine. Without the filling of every new
    tensor with NaN that comes with them: a debugging aid that shows a kernel reading memory nobody wrote, at about
    170 fills a step (5 % of a driving network's step on 2 CPU threads); the results are the same."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]


def fit(task: Trainable, cfg: TrainConfig, dist_info: "Dist", device: torch.device, resume: bool, quiet: bool, restart_best: bool = False) -> dict[str, Any]:
    with deterministic_kernels():
        return _fit(task, cfg, dist_info, device, resume, quiet, restart_best)


def _fit(task: Trainable, cfg: TrainConfig, dist_info: "Dist", device: torch.device, resume: bool, quiet: bool, restart_best: bool) -> dict[str, Any]:
    run = Path(cfg.out)
    stepper = Stepper(task, cfg, dist_info, device)
    net, opt, scaler, ema = stepper.net, stepper.opt, stepper.scaler, stepper.ema

    counters: dict[str, Any] = {"epoch": 0, "batch": 0, "step": 0, "seconds": 0.0, "best_score": None, "done": False}
    history: list[dict[str, Any]] = []
    if resume and (run / f"{STATE}.json").is_file():
        counters = _load_state(run, net, opt, ema)
        if scaler.is_enabled() and counters.get("scaler"):  # the loss scale where the run stopped, not the initial one
            scaler.load_state_dict(counters["scaler"])
        counters.setdefault("best_score", counters.pop("best_val_loss", None))  # states written before the rename
        history = read_json(run / "metrics.json").get("history", []) if (run / "metrics.json").is_file() else []
        counters["done"] = False  # a larger budget may have been given
        if restart_best:
            counters["best_score"] = None
            counters["best_from_step"] = counters["step"]
    elif dist_info.main:
        run.mkdir(parents=True, exist_ok=True)
        net.save(run, "last", task.extra)  # config.json from the start: the run is identifiable
    # where the steps ran, as resolved (config.json keeps what was asked, often auto); a run resumed elsewhere lists both
    counters["trained_on"] = list(dict.fromkeys([*counters.get("trained_on", []), f"{device.type} {stepper.precision}"]))

    writer = None
    if dist_info.main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run / "tb"))

    def out_of_budget() -> bool:
        return counters["epoch"] >= cfg.max_epochs or (cfg.minutes is not None and counters["seconds"] >= cfg.minutes * 60)

    def checkpoint() -> None:
        if dist_info.main:
            counters["slot"] = _save_state(run, net, opt, {**counters, "scaler": scaler.state_dict()}, ema)

    def diverged(what: str) -> None:
        kept = "its last checkpoint is kept" if (run / f"{STATE}.json").is_file() else "no checkpoint was written"
        raise TrainingDiverged(f"{task.label} diverged: {what}; {run} is not finished and {kept}. "
                               "Lower --lr, or check the data for values that are not finite.")

    steps_at: dict[int, tuple[int, int]] = {}  # step -> (epoch, batch) of the steps since the last read

    def read_device(bar: tqdm | None = None) -> bool:
        """The one read of the device between log steps: stops on a training loss that was not finite since the last
        read (before the resumable state can keep the weights it made); True when any process is out of time."""
        averages, bad = stepper.read()
        late = cfg.minutes is not None and counters["seconds"] >= cfg.minutes * 60
        any_bad, any_late = any_process(dist_info, [bad is not None, late], device)
        if any_bad:
            if bad is None:
                diverged(f"the training loss is not finite in another process, by step {counters['step']}")
            epoch, b = steps_at.get(bad[0], (counters["epoch"], -1))
            diverged(f"the training loss is {bad[1]} at epoch {epoch + 1}, batch {b} (step {bad[0]})")
        steps_at.clear()
        if bar is not None:
            bar.set_postfix({k: f"{v:.3f}" for k, v in averages.items()})
        if writer is not None:
            for k, v in averages.items():
                writer.add_scalar(f"train/{k}", v, counters["step"])
        return any_late

    def end_of_period() -> None:
        """Validate, keep the best weights (the moving average, with ema), write metrics; a loss
        that is not finite stops training instead."""
        bad: float | None = None
        with averaged_weights(net, ema):
            metrics = task.validate(device, dist_info)  # every process its share: none waits for another's
            if not math.isfinite(metrics["val_loss"]):
                bad = metrics["val_loss"]
            elif dist_info.main:
                row = {"epoch": counters["epoch"], "batch": counters["batch"], "step": counters["step"], "seconds": round(counters["seconds"], 1), **metrics}
                history.append(row)
                if writer is not None:
                    for k, v in metrics.items():
                        writer.add_scalar(f"val/{k[4:]}", v, counters["step"])
                best = counters["best_score"]
                if best is None or score(metrics) < best:
                    counters["best_score"] = score(metrics)
                    net.save(run, "best", task.extra)
                net.save(run, "last", task.extra)
        net.train()
        if bad is not None:  # every process has the same figures, so all stop here
            diverged(f"the validation loss is {bad} after epoch {counters['epoch']} (step {counters['step']})")
        if dist_info.main:
            write_metrics(run, task.label, history, counters)
            checkpoint()
        barrier(dist_info)

    started = time.monotonic() - counters["seconds"]
    last_ckpt = time.monotonic()
    net.train()
    try:
        while not out_of_budget():
            n_batches = task.batches_per_epoch()
            usable = n_batches - n_batches % dist_info.world  # every process takes as many steps
            mine = [b for b in range(counters["batch"], usable) if b % dist_info.world == dist_info.rank]  # this process's share
            bar = tqdm(
                total=n_batches, initial=counters["batch"], desc=f"{task.label} epoch {counters['epoch'] + 1}",
                unit="batch", dynamic_ncols=True, disable=quiet or not dist_info.main, leave=False,
            )
            late = False
            feed = prepared(task, counters["epoch"], mine, device, cfg.prefetch)
            for b, batch, _ in feed:
                steps_at[counters["step"]] = (counters["epoch"], b)
                stepper.step(batch, counters["step"])
                counters["batch"] = b - dist_info.rank + dist_info.world  # only now: an interruption before this point redoes the batch
                counters["step"] += 1
                counters["seconds"] = time.monotonic() - started
                bar.update(dist_info.world)
                if counters["step"] % LOG_EVERY == 0:
                    late = read_device(bar)
                    if time.monotonic() - last_ckpt > cfg.checkpoint_seconds:
                        checkpoint()
                        last_ckpt = time.monotonic()
                    if late:
                        break
            feed.close()
            bar.close()
            if not late:
                read_device()  # the epoch's last steps, before validation
            if counters["batch"] >= usable:  # the epoch's batches are done (a multiple of the processes: all are)
                counters["batch"] = 0
                counters["epoch"] += 1
            end_of_period()
    except KeyboardInterrupt:
        counters["seconds"] = time.monotonic() - started
        read_device()  # weights that a loss which was not finite made are not kept
        checkpoint()
        raise KeyboardInterrupt(f"training interrupted at step {counters['step']}; 'nacdrive train --out {run} --resume' continues") from None
    finally:
        if writer is not None:
            writer.close()
    counters["done"] = True
    checkpoint()
    metrics = write_metrics(run, task.label, history, counters) if dist_info.main else {}
    barrier(dist_info)
    return metrics


@contextlib.contextmanager
def averaged_weights(net: nn.Module, ema: MovingAverage | None) -> Iterator[None]:
    """Within: net holds the moving average of its weights (without ema, nothing changes)."""
    if ema is None:
        yield
        return
    raw = {k: v.detach().clone() for k, v in net.state_dict().items()}
    net.load_state_dict(ema.module.state_dict())
    try:
        yield
    finally:
        net.load_state_dict(raw)


def score(metrics: dict[str, Any]) -> float:
    """What "best" minimises: minus the closed-loop return where the task drove (val_return),
    else the validation loss."""
    return -metrics["val_return"] if "val_return" in metrics else metrics["val_loss"]


def write_metrics(run: Path, label: str, history: list[dict[str, Any]], counters: dict[str, Any]) -> dict[str, Any]:
    since = [r for r in history if r["step"] > counters.get("best_from_step", -1)]
    best = min(since, key=score) if since else None
    metrics = {
        "run": str(run),
        "head": label,
        "best": best,
        "last": history[-1] if history else None,
        "steps": counters["step"],
        "epochs": counters["epoch"],
        "train_seconds": round(counters["seconds"], 1),
        "trained_on": counters.get("trained_on", []),  # device type and arithmetic, e.g. ["cpu fp32"] or ["cuda fp16"]
        "finished": bool(counters.get("done")),
        "history": history,
    }
    write_json(run / "metrics.json", metrics)
    return metrics
