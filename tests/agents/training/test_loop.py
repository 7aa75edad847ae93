"""The training loop (agents.training.loop.fit) on a task small enough to read: it learns, keeps the
best weights, resumes an interrupted run to the very weights of an uninterrupted one, and stops on
a loss that is not finite with a message saying what to do."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from agents.training.distributed import Dist
from agents.training.loop import TrainConfig, dropout_seed, fit, prepare_run
from nac.checkpoint import load_checkpoint, save_checkpoint
from nac.config import ConfigError, TrainingDiverged


class Line(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(2, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.lin(x)

    def save(self, run: Path, name: str, extra: dict) -> None:
        save_checkpoint(run, {"task": "carracing", **extra}, self.state_dict(), name)  # as a run folder is


class LineTrainable:
    """y = 3 x0 - 2 x1 + 1 from fixed batches; `stop_at` raises Ctrl-C at that step, `nan_at` returns NaN."""

    label = "line"

    def __init__(self, stop_at: int | None = None, nan_at: int | None = None) -> None:
        self.net, self.extra, self.steps, self.losses = Line(), {}, 0, 0
        self.stop_at, self.nan_at = stop_at, nan_at
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(8, 16, 2, generator=g)
        self.y = self.x @ torch.tensor([[3.0], [-2.0]]) + 1
        self.vx = torch.randn(64, 2, generator=g)
        self.vy = self.vx @ torch.tensor([[3.0], [-2.0]]) + 1

    def batches_per_epoch(self) -> int:
        return 8

    def batch(self, epoch: int, b: int, device: torch.device) -> dict[str, Tensor]:
        if self.steps == self.stop_at:
            raise KeyboardInterrupt
        self.steps += 1
        return {"x": self.x[b], "y": self.y[b]}

    def loss(self, model: nn.Module, batch: dict[str, Tensor], device: torch.device) -> tuple[Tensor, dict[str, float]]:
        loss = ((model(batch["x"]) - batch["y"]) ** 2).mean()
        self.losses += 1  # counted here, not in batch(): the loop prepares batches ahead of the steps
        if self.nan_at is not None and self.losses > self.nan_at:
            loss = loss * float("nan")
        return loss, {}

    def validate(self, device: torch.device, share: Dist = Dist()) -> dict[str, float]:
        with torch.no_grad():
            return {"val_loss": float(((self.net(self.vx) - self.vy) ** 2).mean())}


def _cfg(out: Path, epochs: int = 5) -> TrainConfig:
    return TrainConfig(data=["-"], out=str(out), epochs=epochs, lr=0.05, seed=3, checkpoint_seconds=1e9)


def _fit(task: LineTrainable, cfg: TrainConfig, resume: bool = False) -> dict:
    task.extra = {"train": asdict(cfg)}
    return fit(task, prepare_run(cfg, resume) if resume else cfg, Dist(), torch.device("cpu"), resume=resume, quiet=True)


def test_fit_learns_and_keeps_the_best_weights(tmp_path):
    m = _fit(LineTrainable(), _cfg(tmp_path / "r"))
    losses = [r["val_loss"] for r in m["history"]]
    assert m["epochs"] == 5 and m["steps"] == 40 and m["finished"] and len(losses) == 5
    assert losses[-1] < losses[0] / 5
    _, best = load_checkpoint(tmp_path / "r", name="best")
    net = Line()
    net.load_state_dict(best)
    with torch.no_grad():  # best.safetensors holds the weights of the lowest validation loss
        assert float(((net(LineTrainable().vx) - LineTrainable().vy) ** 2).mean()) == pytest.approx(min(losses), rel=1e-5)
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["best"]["val_loss"] == min(losses)


def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    whole = LineTrainable()
    _fit(whole, _cfg(tmp_path / "whole"))
    with pytest.raises(KeyboardInterrupt, match="training interrupted at step 19; 'nacdrive train --out .* --resume' continues"):
        _fit(LineTrainable(stop_at=19), _cfg(tmp_path / "cut"))
    resumed = LineTrainable()
    m = _fit(resumed, _cfg(tmp_path / "cut"), resume=True)
    assert m["steps"] == 40 and resumed.steps == 21  # only the steps the interruption left
    _, a = load_checkpoint(tmp_path / "whole", name="last")
    _, b = load_checkpoint(tmp_path / "cut", name="last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text())["trained_on"] == ["cpu fp32"]


def test_a_loss_that_is_not_finite_stops_the_run_and_says_what_to_do(tmp_path):
    with pytest.raises(TrainingDiverged, match=r"line diverged: the training loss is nan at epoch 1, batch 3 .*Lower --lr"):
        _fit(LineTrainable(nan_at=3), _cfg(tmp_path / "r"))


def test_a_run_is_never_overwritten_and_only_a_run_resumes(tmp_path):
    _fit(LineTrainable(), _cfg(tmp_path / "r", epochs=1))
    with pytest.raises(ConfigError, match="is not empty; use --resume"):
        prepare_run(_cfg(tmp_path / "r"), resume=False)
    with pytest.raises(ConfigError, match="nothing to resume"):
        prepare_run(_cfg(tmp_path / "none"), resume=True)


def test_every_process_draws_its_own_dropout_and_one_process_the_same_as_before():
    one = [dropout_seed(7, step, Dist()) for step in range(5)]
    assert one == [7 * 1_000_003 + step for step in range(5)]  # a single process: the seeds runs were trained with
    two = {(step, rank): dropout_seed(7, step, Dist(rank, 2)) for step in range(50) for rank in (0, 1)}
    assert len(set(two.values())) == len(two)  # no two (step, rank) share a stream


def test_bfloat16_trains_on_the_cpu_through_the_same_loop(tmp_path):
    cfg = TrainConfig.from_dict({**asdict(_cfg(tmp_path / "bf16")), "precision": "bf16"})
    m = _fit(LineTrainable(), cfg)
    losses = [r["val_loss"] for r in m["history"]]
    assert m["finished"] and all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0] / 5
    whole = _fit(LineTrainable(), _cfg(tmp_path / "fp32"))
    assert losses != [r["val_loss"] for r in whole["history"]]  # another arithmetic, not float32 under another name


def test_a_float16_run_resumes_with_its_loss_scale_to_the_weights_of_an_uninterrupted_one(tmp_path):
    cfg = lambda out: TrainConfig.from_dict({**asdict(_cfg(out)), "precision": "fp16"})  # noqa: E731
    _fit(LineTrainable(), cfg(tmp_path / "whole"))
    with pytest.raises(KeyboardInterrupt):
        _fit(LineTrainable(stop_at=19), cfg(tmp_path / "cut"))
    saved = json.loads((tmp_path / "cut" / "train_state.json").read_text())["scaler"]
    assert saved["scale"] < 2.0 ** 16  # the scaler backed off from its initial scale before the interruption
    _fit(LineTrainable(), cfg(tmp_path / "cut"), resume=True)
    _, a = load_checkpoint(tmp_path / "whole", name="last")
    _, b = load_checkpoint(tmp_path / "cut", name="last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text())["trained_on"] == ["cpu fp16"]


def test_the_resumable_state_alternates_between_two_files(tmp_path):
    _fit(LineTrainable(), _cfg(tmp_path / "r", epochs=3))
    run = tmp_path / "r"
    slots = [run / f"train_state.{k}.safetensors" for k in (0, 1)]
    assert all(p.is_file() for p in slots)  # each checkpoint went to the file the previous one did not
    newest = max(slots, key=lambda p: p.stat().st_mtime_ns)
    assert json.loads((run / "train_state.json").read_text())["slot"] == slots.index(newest)


def test_the_moving_average_is_torchs_without_reading_the_device():
    """MovingAverage keeps what torch's AveragedModel (get_ema_multi_avg_fn, use_buffers) keeps, in the same
    state_dict, so a resumable state of either reads into the other."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    from agents.training.loop import MovingAverage

    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))  # a float and an integer buffer among the weights
    ours, torchs = MovingAverage(net, 0.9), AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(torch.randn(p.shape, generator=g))
        net(torch.randn(8, 3, generator=g))  # moves the batch-norm statistics and its counter
        ours.update(net)
        torchs.update_parameters(net)
    a, b = ours.state_dict(), torchs.state_dict()
    assert a.keys() == b.keys() and all(torch.allclose(a[k].double(), b[k].double(), rtol=1e-6, atol=0) for k in a)
    again = MovingAverage(net, 0.9)
    again.load_state_dict(b)
    assert again.started and int(again.n_averaged) == 5
