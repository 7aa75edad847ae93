"""PilotNet training on Udacity recordings: the real recording's rows (Windows paths and all),
PilotNet's own dense layers as the paper's baseline beside a registry head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agents.training.trainers import train
from agents.training.loop import TrainConfig
from agents.training.udacity import SteeringPolicy
from nac.pilotnet import DENSE
from tests.limits import seconds

REAL = str(Path(__file__).parents[2] / "data" / "udacity-real")


@pytest.mark.parametrize("head", [DENSE, "nac"])
def test_training_on_the_real_recording_and_steering_from_it(tmp_path, head):
    out = tmp_path / head
    m = train(TrainConfig(data=[REAL], out=str(out), task="udacity", head=head, epochs=2, batch_size=8,
                          net={"d_model": 20, "num_heads": 4} if head == "nac" else {}), quiet=True)
    assert m["epochs"] == 2 and m["best"]["val_loss"] >= 0 and len(m["history"]) == 2
    policy = SteeringPolicy.from_run(out)
    steer = policy.select_action(torch.randint(0, 255, (160, 320, 3), dtype=torch.uint8).numpy())
    assert -1 < steer < 1


def test_a_speed_output_learns_the_recorded_speed_beside_the_steering(tmp_path):
    out = tmp_path / "speed"
    m = train(TrainConfig(data=[REAL], out=str(out), task="udacity", head=DENSE, epochs=2, batch_size=8, lr=1e-3,
                          net={"speed_output": True}), quiet=True)
    hist = m["history"]
    assert all("val_speed_mae" in r for r in hist) and hist[-1]["val_speed_mae"] < hist[0]["val_speed_mae"]
    policy = SteeringPolicy.from_run(out)
    assert policy.predicts_speed
    policy.select_action(torch.randint(0, 255, (160, 320, 3), dtype=torch.uint8).numpy())
    assert 0 < policy.last["speed"] < 40 and -1 < policy.last["steering"] < 1


def test_two_data_parallel_processes_end_with_the_same_weights(tmp_path):
    """torchrun, two gloo processes, a PilotNet run on the real recording: the gradients are synchronised through
    DistributedDataParallel, so every rank's parameters are the same after training (rank 0 saves its own), and the
    validation split between them adds up to one process's."""
    from tests.agents.training.ddp_ranks_run import ranks_digests

    cfg = {"data": [REAL], "out": str(tmp_path / "ddp"), "task": "udacity", "head": "gru", "epochs": 1, "batch_size": 4,
           "device": "cpu", "net": {"d_model": 8}}
    ranks = ranks_digests(cfg)
    assert len(ranks) == 2 and ranks[0]["digest"] == ranks[1]["digest"]
    # each validated half of the rows and both got the figures of them all, those one process finds
    from agents.training.udacity import UdacityTrainable
    from nac.pilotnet import PilotNet

    task = UdacityTrainable(TrainConfig.from_dict(json.loads((tmp_path / "ddp" / "config.json").read_text())["train"]), quiet=True)
    task.net = PilotNet.load(tmp_path / "ddp", "last")
    alone = task.validate(torch.device("cpu"))
    assert ranks[0]["validation"] == ranks[1]["validation"] and alone.keys() == ranks[0]["validation"].keys()
    assert all(alone[k] == pytest.approx(v, rel=1e-5) for k, v in ranks[0]["validation"].items())


def test_udacity_batches_made_ahead_are_the_batches_made_when_asked(tmp_path):
    """Decoded by several threads and prepared ahead of the step: the same images, augmentations and labels."""
    from agents.training.loop import prepared
    from agents.training.udacity import UdacityTrainable

    cfg = TrainConfig(data=[REAL], out=str(tmp_path / "u"), task="udacity", head=DENSE, batch_size=4, seed=5)
    n = UdacityTrainable(cfg, quiet=True).batches_per_epoch()
    got = {ahead: [batch for epoch in (0, 1) for _, batch, _ in prepared(UdacityTrainable(cfg, quiet=True), epoch, list(range(n)), torch.device("cpu"), ahead)]
           for ahead in (0, 2)}
    assert len(got[0]) == 2 * n and all(torch.equal(x[k], y[k]) for x, y in zip(got[0], got[2]) for k in ("image", "steering", "speed"))
    assert not torch.equal(got[0][0]["image"], got[0][n]["image"])  # another epoch, other draws: the comparison is not of one batch


def _first_batch(cfg: TrainConfig) -> int:
    from agents.training.udacity import UdacityTrainable

    return len(UdacityTrainable(cfg, quiet=True).batch(0, 0, torch.device("cpu"))["image"])


def test_a_process_forked_after_training_decodes_images_too(tmp_path):
    """Episode workers are forked from a process that has trained (a study): the image decoders' threads do not
    come with them, so a forked process makes its own pool instead of queueing work that nobody takes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cfg = TrainConfig(data=[REAL], out=str(tmp_path / "u"), task="udacity", head=DENSE, batch_size=4)
    assert _first_batch(cfg) == 4  # the pool exists in this process, its threads idle
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        assert pool.submit(_first_batch, cfg).result(timeout=seconds(60)) == 4
