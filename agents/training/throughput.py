"""Training throughput (`nacdrive bench train`): the training step and its batches as `nacdrive train` runs them
(the task's batches through `prepared`, the step through `Stepper`, the loop's read of the device every LOG_EVERY
steps), for the CarRacing driving network and for PilotNet, on every device present, with batches prepared ahead
and without, and on the CPU with torch's dropout in place of the network's own: samples a second, the step's time
(p50, p99) and the share of it spent waiting for the batch, each row beside its twin in the same run."""

from __future__ import annotations

import copy
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterator

import numpy as np
import torch

from agents.training import batches, bc
from agents.training.distributed import Dist
from agents.training.loop import LOG_EVERY, Stepper, TrainConfig, deterministic_kernels, prepared
from agents.training.udacity import UdacityTrainable
from nac.driving import Dropout

WARMUP = 5  # steps left out of the figures: the first ones allocate and pick kernels


@dataclass
class Variant:
    task: str  # carracing or udacity
    device: str
    prefetch: int
    torch_dropout: bool = False

    @property
    def label(self) -> str:
        data = f"prefetch {self.prefetch}" if self.prefetch else "batches made when asked"
        return data + (", torch's dropout" if self.torch_dropout else "")


def devices() -> list[str]:
    """The CPU, and the first GPU where there is one."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def variants(tasks: list[str], on: list[str], prefetch: int) -> Iterator[Variant]:
    for task in tasks:
        for device in on:
            yield Variant(task, device, 0)
            yield Variant(task, device, prefetch)
            if task == "carracing" and device == "cpu":  # the network's own dropout exists for the CPU alone
                yield Variant(task, device, prefetch, torch_dropout=True)


def with_torch_dropout(net: torch.nn.Module) -> torch.nn.Module:
    """A copy of net (same weights) whose Dropout layers are torch's nn.Dropout."""
    twin = copy.deepcopy(net)
    for module in list(twin.modules()):
        for name, child in module.named_children():
            if isinstance(child, Dropout):
                setattr(module, name, torch.nn.Dropout(child.p))
    return twin


def make_task(cfg: TrainConfig) -> Any:
    if cfg.task == "udacity":
        return UdacityTrainable(cfg, quiet=True)
    demos = batches.Demos.load(cfg.data, quiet=True)
    return bc.CarRacingTrainable(bc.resolve_config(cfg, demos, None), demos, resume=False)


def time_steps(cfg: TrainConfig, steps: int, torch_dropout: bool = False) -> dict[str, Any]:
    """`steps` training steps (after WARMUP more) of the run `cfg` describes: per step the seconds waited for the
    batch and the whole step's, the device synchronised at its end so that a GPU's step is timed, not queued."""
    task = make_task(cfg)
    if torch_dropout:
        task.net = with_torch_dropout(task.net)
    device = torch.device(cfg.device)
    stepper = Stepper(task, cfg, Dist(), device)
    per_epoch = task.batches_per_epoch()
    waited, whole = [], []
    k = 0
    epoch = 0
    while k < steps + WARMUP:
        batches = list(range(min(per_epoch, steps + WARMUP - k)))
        t0 = time.perf_counter()
        for _, batch, wait in prepared(task, epoch, batches, device, cfg.prefetch):
            stepper.step(batch, k)
            k += 1
            if k % LOG_EVERY == 0:
                stepper.read()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t1 = time.perf_counter()
            if k > WARMUP:
                waited.append(wait)
                whole.append(t1 - t0)
            t0 = t1
        epoch += 1
    ms = np.asarray(whole) * 1e3
    return {"steps": len(ms), "samples_per_s": cfg.batch_size * len(ms) / float(np.sum(whole)),
            "step_p50_ms": float(np.percentile(ms, 50)), "step_p99_ms": float(np.percentile(ms, 99)),
            "wait_share": float(np.sum(waited) / np.sum(whole))}


def bench_train(data: dict[str, str], head: str = "nac", steps: int = 60, prefetch: int | None = None,
                on: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of throughput per task of `data` ({"carracing": demonstrations, "udacity": a recording}) and device,
    each with its ratio to the row of its task and device whose batches are made when asked ("x when asked") and to
    the CPU's row of the same variant ("x cpu")."""
    ahead = TrainConfig.prefetch if prefetch is None else prefetch
    rows = []
    with tempfile.TemporaryDirectory() as tmp, deterministic_kernels():  # the kernels training runs
        for v in variants(list(data), on or devices(), ahead):
            cfg = TrainConfig(data=[data[v.task]], out=tmp, task=v.task, head=head, device=v.device, prefetch=v.prefetch,
                              checkpoint_seconds=1e9)
            if v.task == "udacity":
                cfg = replace(cfg, net={"speed_output": True})
            rows.append({**asdict(v), "variant": v.label, "head": head, "batch_size": cfg.batch_size,
                         **time_steps(cfg, steps, v.torch_dropout)})
    for r in rows:
        asked = next(o for o in rows if o["task"] == r["task"] and o["device"] == r["device"] and o["prefetch"] == 0)
        cpu = next((o for o in rows if o["device"] == "cpu" and (o["task"], o["prefetch"], o["torch_dropout"])
                    == (r["task"], r["prefetch"], r["torch_dropout"])), None)
        r["x_when_asked"] = r["samples_per_s"] / asked["samples_per_s"]
        r["x_cpu"] = r["samples_per_s"] / cpu["samples_per_s"] if cpu else None
    return rows


def twins(data: str, head: str = "nac", steps: int = 20, on: tuple[str, str] = ("cpu", "cuda")) -> dict[str, Any]:
    """The same CarRacing run trained `steps` steps in float32 on two devices, from the same weights, batches and
    dropout seeds (dropout: torch's on both, as a GPU draws it): the largest difference of a parameter and of a
    step's loss between them, relative to the parameter's (the loss's) size. On one device twice: 0, as the loop is
    deterministic there. Across devices expect up to about 1e-3 (cuDNN's convolutions round through TF32)."""
    out: dict[str, Any] = {"devices": list(on), "steps": steps}
    nets, losses = [], []
    with tempfile.TemporaryDirectory() as tmp, deterministic_kernels():
        for device in on:
            cfg = TrainConfig(data=[data], out=tmp, head=head, device=device, precision="fp32", prefetch=0, checkpoint_seconds=1e9)
            task = make_task(cfg)
            task.net = with_torch_dropout(task.net)
            stepper = Stepper(task, cfg, Dist(), torch.device(device))
            seen = []
            for b, batch, _ in prepared(task, 0, list(range(min(steps, task.batches_per_epoch()))), torch.device(device), 0):
                stepper.step(batch, b)
                seen.append(float(stepper.last_loss))  # a read each step: a check, not a training
            nets.append({k: v.detach().cpu().double() for k, v in task.net.state_dict().items()})
            losses.append(np.asarray(seen))
    out["param_rel_diff"] = max(float((nets[0][k] - nets[1][k]).abs().max() / nets[0][k].abs().max().clamp(min=1e-12)) for k in nets[0])
    out["loss_rel_diff"] = float(np.max(np.abs(losses[0] - losses[1]) / np.maximum(np.abs(losses[0]), 1e-12)))
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | device | batches | samples/s | step p50 ms | step p99 ms | waiting for data | x when asked | x cpu |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['device']} | {r['variant']} | {r['samples_per_s']:.1f} | {r['step_p50_ms']:.1f} | "
                     f"{r['step_p99_ms']:.1f} | {100 * r['wait_share']:.1f} % | {r['x_when_asked']:.2f} | "
                     f"{'' if r['x_cpu'] is None else format(r['x_cpu'], '.2f')} |")
    return "\n".join(lines)
