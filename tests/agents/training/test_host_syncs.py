"""A training step reads nothing back from the device (a GPU would wait for every such read): counted on the CPU
by patching the tensor methods that bring a value to the host, over real steps of both tasks, several heads and
the options whose losses decode on the device; the loop's read every LOG_EVERY steps is where they happen."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from agents.training import bc
from agents.training.distributed import Dist
from agents.training.loop import LOG_EVERY, Stepper, TrainConfig, fit, prepared
from agents.training.udacity import UdacityTrainable
from nac.driving import Dropout

REAL = str(Path(__file__).parents[2] / "data" / "udacity-real")
READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__")  # each copies a value to the host
CPU = torch.device("cpu")


@pytest.fixture
def host_reads(monkeypatch):
    """A list that gets the name of every host read made while the fixture is active. The steps run as on a GPU:
    with torch's own dropout, as the driving network's Dropout uses off the CPU (on the CPU it draws its masks with
    numpy, seeded by one number read from torch's generator: a read of host memory, no device to wait for)."""
    monkeypatch.setattr(Dropout, "forward", nn.Dropout.forward)
    seen: list[str] = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            seen.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return seen


def _carracing(demos: str, tmp_path: Path, **train) -> tuple[bc.CarRacingTrainable, TrainConfig]:
    loaded = bc.Demos.load([demos], quiet=True)
    cfg = bc.resolve_config(TrainConfig(data=[demos], out=str(tmp_path / "r"), window=4, epochs=1, seed=1, **train), loaded, None)
    return bc.CarRacingTrainable(cfg, loaded, resume=False), cfg


def _reads_per_step(task, cfg: TrainConfig, host_reads: list[str], steps: int = 4) -> list[list[str]]:
    """The host reads of each of the first `steps` steps."""
    assert task.batches_per_epoch() >= steps
    stepper = Stepper(task, cfg, Dist(), CPU)
    out = []
    for b, batch, _ in prepared(task, 0, list(range(steps)), CPU, ahead=0):
        host_reads.clear()
        stepper.step(batch, b)
        out.append(list(host_reads))
    host_reads.clear()
    stepper.read()
    assert host_reads, "the patch sees a read: the loop's own read is one"
    return out


@pytest.mark.parametrize("head, train", [
    ("nac", {}),
    ("gru", {"ema": 0.9, "augment": "randconv", "shift": 2}),
    ("cfc", {"precision": "bf16"}),
    ("mha", {"precision": "fp16"}),
])
def test_a_continuous_step_reads_nothing_back(tiny_demos_continuous, tmp_path, host_reads, head, train):
    task, cfg = _carracing(tiny_demos_continuous, tmp_path, head=head, **train)
    assert _reads_per_step(task, cfg, host_reads) == [[]] * 4


@pytest.mark.parametrize("net", [{}, {"wheel_target": True}, {"brake_gate": False, "rate_window": 4}])
def test_a_discrete_step_reads_nothing_back(tiny_demos, tmp_path, host_reads, net):
    task, cfg = _carracing(tiny_demos, tmp_path, head="nac", net=net)
    assert _reads_per_step(task, cfg, host_reads) == [[]] * 4


def test_a_brake_gate_step_reads_nothing_back(tiny_demos_continuous, tmp_path, host_reads):
    task, cfg = _carracing(tiny_demos_continuous, tmp_path, head="lstm", net={"brake_gate": True})
    assert _reads_per_step(task, cfg, host_reads) == [[]] * 4


@pytest.mark.parametrize("head", ["dense", "nac"])
def test_a_udacity_step_reads_nothing_back(tmp_path, host_reads, head):
    cfg = TrainConfig(data=[REAL], out=str(tmp_path / "u"), task="udacity", head=head, batch_size=4,
                      net={"d_model": 20, "num_heads": 4, "speed_output": True} if head == "nac" else {})
    assert _reads_per_step(UdacityTrainable(cfg, quiet=True), cfg, host_reads, steps=2) == [[]] * 2


def test_the_loop_reads_the_device_only_every_log_every_steps(tiny_demos_continuous, tmp_path, host_reads, monkeypatch):
    """Between two of the loop's reads, its steps read nothing: the reads fall on steps LOG_EVERY apart (and at the
    epoch's end, before validation)."""
    task, cfg = _carracing(tiny_demos_continuous, tmp_path, head="gru", batch_size=2, chunk=2, checkpoint_seconds=1e9)
    n = task.batches_per_epoch()
    assert n > 2 * LOG_EVERY, n
    reads_at: dict[int, int] = {}
    step_of = {"now": 0}
    original = Stepper.step

    def step(self, batch, k):
        step_of["now"] = k
        host_reads.clear()
        original(self, batch, k)
        reads_at[k] = len(host_reads)

    original_read = Stepper.read
    read_after: list[int] = []

    def read(self):
        read_after.append(step_of["now"])
        return original_read(self)

    monkeypatch.setattr(Stepper, "step", step)
    monkeypatch.setattr(Stepper, "read", read)
    fit(task, cfg, Dist(), CPU, resume=False, quiet=True)
    assert set(reads_at.values()) == {0} and len(reads_at) == n
    assert read_after == [k - 1 for k in range(LOG_EVERY, n + 1, LOG_EVERY)] + [n - 1]
