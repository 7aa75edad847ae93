"""Behaviour cloning: run folders, the split by episode, resume to the same result, k-fold,
class balance, bad input, and DistributedDataParallel on CPU."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from agents.training import batches, bc, labels
from agents.training.batches import Batches
from agents.training.labels import class_weights
from agents.training.trainers import train
from agents.training.loop import LOG_EVERY, TrainConfig
from agents.driving.policy import DrivingPolicy, load_run
from datasets.demos import DataError, Episode
from datasets.windows import FrameStore, FrameWindows
from nac import ConfigError
from nac.config import TrainingDiverged
from scripts.cli import main
from tests.limits import seconds


def _cfg(data, out, **kw):
    return TrainConfig(data=[data] if isinstance(data, str) else data, out=str(out), **{"head": "gru", "window": 4, "epochs": 2, "batch_size": 16, "chunk": 4, **kw})


def test_a_run_folder_holds_everything_and_rebuilds_alone(tiny_demos, tmp_path):
    m = train(_cfg(tiny_demos, tmp_path / "run"), quiet=True)
    run = tmp_path / "run"
    for name in ("config.json", "best.safetensors", "last.safetensors", "metrics.json", "train_state.json"):
        assert (run / name).is_file(), name
    assert list((run / "tb").iterdir()), "TensorBoard events"
    cfg = json.loads((run / "config.json").read_text())
    val = set(cfg["train"]["val_episodes"])
    assert len(val) == 1 and val.isdisjoint(cfg["data"]["episodes"][i] for i in range(4) if cfg["data"]["episodes"][i] not in val)
    assert cfg["data"]["train_episodes"] == 3 and cfg["data"]["val_episodes"] == 1
    assert m["finished"] and m["epochs"] == 2 and len(m["history"]) == 2
    assert 0 <= m["best"]["val_accuracy"] <= 1
    policy = DrivingPolicy.from_run(run)
    assert policy.net.config.head == "gru" and policy.net.config.window == 4


def test_training_lowers_the_loss(tiny_demos, tmp_path):
    """What training minimises goes down: the loss over the training episodes' windows, at the
    initial weights and after six epochs. (One held-out episode of 48 frames is too small to
    show generalisation reliably; the pretrained runs' metrics show that.)"""
    run = tmp_path / "run"
    train(_cfg(tiny_demos, run, epochs=6, lr=3e-3), quiet=True)
    cfg = TrainConfig.from_dict(json.loads((run / "config.json").read_text())["train"])
    task = bc.CarRacingTrainable(cfg, batches.Demos.load(cfg.data), resume=False)  # the initial weights
    before = bc.validate(task.net, task.train_windows, torch.device("cpu"))["val_loss"]
    after = bc.validate(load_run(run, "last"), task.train_windows, torch.device("cpu"))["val_loss"]
    assert after < 0.8 * before


def _weights(run):
    return load_file(str(Path(run) / "last.safetensors"))


@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_an_interrupted_run_resumes_to_the_same_result(tiny_demos, tmp_path, monkeypatch, ema):
    train(_cfg(tiny_demos, tmp_path / "straight", ema=ema), quiet=True)
    calls = {"n": 0}
    original = Batches.batch

    def flaky(self, rows, back=None):
        calls["n"] += 1
        if calls["n"] == 11:  # in the middle of the second epoch
            raise KeyboardInterrupt
        return original(self, rows, back)

    monkeypatch.setattr(Batches, "batch", flaky)
    with pytest.raises(KeyboardInterrupt, match="--resume"):
        train(_cfg(tiny_demos, tmp_path / "cut", ema=ema), quiet=True)
    monkeypatch.setattr(Batches, "batch", original)
    state = json.loads((tmp_path / "cut" / "train_state.json").read_text())
    assert state["step"] == 10 and not state["done"]
    with pytest.raises(ConfigError, match="not empty; use --resume"):
        train(_cfg(tiny_demos, tmp_path / "cut"), quiet=True)
    m = train(_cfg(tiny_demos, tmp_path / "cut", ema=ema), resume=True, quiet=True)
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert m["finished"] and m["steps"] == json.loads((tmp_path / "straight" / "metrics.json").read_text())["steps"]


def test_ema_keeps_and_validates_the_moving_average_of_the_weights(tiny_demos, tmp_path):
    run = tmp_path / "run"
    m = train(_cfg(tiny_demos, run, ema=0.9), quiet=True)
    state = json.loads((run / "train_state.json").read_text())
    tensors = load_file(str(run / f"train_state.{state['slot']}.safetensors"))
    last = _weights(run)
    assert int(tensors["ema.n_averaged"]) == state["step"] == m["steps"]
    assert all(torch.equal(last[k], tensors[f"ema.module.{k}"]) for k in last)  # saved: the average
    assert not all(torch.equal(last[k], tensors[f"model.{k}"]) for k in last)  # trained on: the raw weights
    net = load_run(run, "last")
    cfg = TrainConfig.from_dict(json.loads((run / "config.json").read_text())["train"])
    task = bc.CarRacingTrainable(cfg, batches.Demos.load(cfg.data), resume=False)
    assert bc.validate(net, task.val_windows, torch.device("cpu"))["val_loss"] == pytest.approx(m["history"][-1]["val_loss"], rel=1e-5)
    with pytest.raises(ConfigError, match="ema must be a number in"):
        _cfg(tiny_demos, run, ema=1.0)


def test_resume_with_a_larger_budget_trains_on(tiny_demos, tmp_path):
    train(_cfg(tiny_demos, tmp_path / "run", epochs=1), quiet=True)
    m = train(_cfg(tiny_demos, tmp_path / "run", epochs=3), resume=True, quiet=True)
    assert m["epochs"] == 3 and len(m["history"]) == 3
    assert m["trained_on"] == ["cpu fp32"]  # the device and arithmetic as resolved (asked: auto), once though resumed


def test_a_time_budget_stops_training(tiny_demos, tmp_path):
    m = train(_cfg(tiny_demos, tmp_path / "run", epochs=None, minutes=0.002), quiet=True)
    assert m["finished"] and m["epochs"] < 5 and m["train_seconds"] >= 0.1 and m["history"]


def test_kfold_by_episode_reports_mean_and_std(tiny_demos, tmp_path):
    m = train(_cfg(tiny_demos, tmp_path / "cv", folds=2, epochs=1), quiet=True)
    assert m["folds"] == 2 and len(m["per_fold"]) == 2
    accs = [f["val_accuracy"] for f in m["per_fold"]]
    assert m["val_accuracy_mean"] == pytest.approx(np.mean(accs)) and m["val_accuracy_std"] == pytest.approx(np.std(accs, ddof=1))
    vals = [set(json.loads((tmp_path / "cv" / f"fold{k}" / "config.json").read_text())["train"]["val_episodes"]) for k in range(2)]
    assert not vals[0] & vals[1] and len(vals[0] | vals[1]) == 4  # the folds partition the episodes


def test_continuous_runs_train_and_drive(tiny_demos_continuous, tmp_path):
    m = train(_cfg(tiny_demos_continuous, tmp_path / "run", epochs=1), quiet=True)
    assert "val_steer_mae" in m["best"]
    policy = DrivingPolicy.from_run(tmp_path / "run")
    assert policy.continuous and policy.select_action(np.zeros((96, 96, 3), np.uint8)).shape == (3,)


def test_bad_input_ends_with_a_clear_message(tiny_demos, tiny_demos_continuous, tmp_path):
    with pytest.raises(DataError, match="not a demonstration set"):
        train(_cfg(str(tmp_path), tmp_path / "run"), quiet=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a demonstration set"):
        train(_cfg(str(tmp_path / "empty"), tmp_path / "run"), quiet=True)
    with pytest.raises(DataError, match="longer than episode"):
        train(_cfg(tiny_demos, tmp_path / "run2", window=60), quiet=True)
    with pytest.raises(DataError, match="mix action spaces"):
        train(_cfg([tiny_demos, tiny_demos_continuous], tmp_path / "run3"), quiet=True)
    with pytest.raises(ConfigError, match="nothing to resume"):
        train(_cfg(tiny_demos, tmp_path / "run4"), resume=True, quiet=True)
    with pytest.raises(ConfigError, match="balance must be one of"):
        _cfg(tiny_demos, tmp_path / "x", balance="oversample")
    train(_cfg(tiny_demos, tmp_path / "gru", epochs=1), quiet=True)
    with pytest.raises(ConfigError, match="different network"):
        train(_cfg(tiny_demos, tmp_path / "lstm", head="lstm", init_from=str(tmp_path / "gru")), quiet=True)


def test_a_loss_that_is_not_finite_stops_training_with_one_line(tiny_demos, tmp_path, monkeypatch, capsys):
    """A NaN loss (a head whose arithmetic broke, as LTC's did on zero time gaps) stops the run, named by
    that step, at the loop's next read of the device (within LOG_EVERY steps), the run not marked finished, the command says so
    in one line; a validation loss that is not finite stops it likewise, and no NaN weights become best."""
    original, calls = bc.CarRacingTrainable.loss, {"n": 0}

    def breaks_at_step_3(self, model, batch, device):
        calls["n"] += 1
        loss, figures = original(self, model, batch, device)
        return (loss * float("nan") if calls["n"] == 3 else loss), figures

    monkeypatch.setattr(bc.CarRacingTrainable, "loss", breaks_at_step_3)
    with pytest.raises(TrainingDiverged, match=r"gru diverged: the training loss is nan at epoch 1, batch 2 \(step 2\)"):
        train(_cfg(tiny_demos, tmp_path / "run"), quiet=True)
    assert 3 <= calls["n"] <= LOG_EVERY + 2 and not (tmp_path / "run" / "metrics.json").is_file()
    calls["n"] = 0
    assert main(["train", "--data", tiny_demos, "--out", str(tmp_path / "cli"), "--head", "gru", "--window", "4", "--quiet"]) == 1
    err = capsys.readouterr().err
    said = err.strip().splitlines()  # --quiet: no progress bars; the line on discrete demonstrations, then the one line
    assert "Traceback" not in err and len(said) == 2 and "demonstrations are discrete" in said[0]
    assert said[1].startswith("nacdrive train: gru diverged: the training loss is nan") and "--lr" in said[1]

    monkeypatch.setattr(bc.CarRacingTrainable, "loss", original)
    monkeypatch.setattr(bc.CarRacingTrainable, "validate", lambda self, device, share: {"val_loss": float("inf"), "val_accuracy": 0.0})
    with pytest.raises(TrainingDiverged, match="the validation loss is inf after epoch 1"):
        train(_cfg(tiny_demos, tmp_path / "val"), quiet=True)
    val = tmp_path / "val"  # not marked finished, no best weights (no validation passed), no state that says done
    assert not (val / "metrics.json").is_file() and not (val / "best.safetensors").is_file()
    assert not any(json.loads(p.read_text()).get("done") for p in val.glob("train_state*.json"))


def test_distributed_data_parallel_on_two_cpu_processes(tiny_demos, tmp_path):
    """torchrun with two gloo processes: both take their share of batches, rank 0 writes."""
    out = tmp_path / "ddp"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",  # a free port of its own
        "-m", "scripts.cli", "train", "--data", tiny_demos, "--out", str(out), "--head", "gru", "--window", "4",
        "--epochs", "1", "--batch-size", "16", "--chunk", "4", "--device", "cpu", "--quiet",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds(300), env=env, cwd=Path(__file__).parents[3])
    assert result.returncode == 0, result.stderr[-2000:]
    m = json.loads((out / "metrics.json").read_text())
    single = len(Batches(FrameWindows(batches.Demos.load([tiny_demos]).store(
        [k for k in batches.Demos.load([tiny_demos]).files if k not in json.loads((out / "config.json").read_text())["train"]["val_episodes"]]), 4), 4, 16, None))
    assert m["finished"] and m["steps"] == single // 2  # each process took half of the batches


@pytest.mark.parametrize("head, folds, select", [("gru", 1, 0), ("nac-const", 1, 0), ("gru", 2, 0), ("gru", 1, 3)])
def test_data_parallel_processes_end_with_the_same_weights(tiny_demos, tmp_path, head, folds, select):
    """Two gloo ranks end training with the same parameters: DistributedDataParallel averaged every step's
    gradients, also for a head some of whose parameters get none (nac-const: no ODE, so its backbone's gates are
    unused), and through k-fold runs, whose summary rank 0 alone writes. Both validated their share and got the
    figures of the whole validation set (and of all the selection episodes), those one process finds for the weights."""
    from tests.agents.training.ddp_ranks_run import ranks_digests

    out = tmp_path / "ddp"
    cfg = {"data": [tiny_demos], "out": str(out), "head": head, "window": 4, "epochs": 1, "batch_size": 8, "chunk": 4,
           "device": "cpu", "folds": folds, "select_episodes": select, "select_steps": 30}
    ranks = ranks_digests(cfg)  # the last fold's weights, with folds
    assert len(ranks) == 2 and ranks[0]["digest"] == ranks[1]["digest"] and ranks[0]["validation"] == ranks[1]["validation"]
    run = out / "fold1" if folds > 1 else out
    saved = TrainConfig.from_dict(json.loads((run / "config.json").read_text())["train"])
    task = bc.CarRacingTrainable(saved, batches.Demos.load(saved.data), resume=False)
    task.net = load_run(run, "last")
    alone = task.validate(torch.device("cpu"))
    assert alone.keys() == ranks[0]["validation"].keys() and ("val_return" in alone) == bool(select)
    assert all(alone[k] == pytest.approx(v, rel=1e-6, abs=1e-9) for k, v in ranks[0]["validation"].items())
    if folds > 1:
        m = json.loads((out / "metrics.json").read_text())
        assert m["folds"] == 2 and len(m["per_fold"]) == 2 and all((out / f"fold{k}" / "best.safetensors").is_file() for k in range(2))


def test_stride_jitter_trains_on_irregular_windows_with_true_times(tiny_demos, tmp_path):
    from agents.training.bc import CarRacingTrainable
    from agents.training.batches import Demos

    cfg = _cfg(tiny_demos, tmp_path / "run", stride_jitter=3, regular_share=0.0, chunk=8, batch_size=8)
    demos = Demos.load(cfg.data)
    cfg = TrainConfig.from_dict({**cfg.__dict__, "val_episodes": [sorted(demos.files)[0]]})
    task = CarRacingTrainable(cfg, demos, resume=False)
    ts = torch.cat([task.batch(0, b, torch.device("cpu"))["timestamps"] for b in range(task.batches_per_epoch())]).numpy()
    gaps = np.round(np.diff(ts, axis=1) * 50).astype(int)
    late = gaps[ts[:, 0] > 0]  # windows that do not reach back past the episode's start
    assert late.size and set(np.unique(late)) <= {1, 2, 3} and len(np.unique(late)) > 1
    m = train(cfg, quiet=True)
    assert m["finished"]


def test_arrival_windows_train_the_steps_a_perturbed_policy_decided_on_with_the_gaps_it_saw(tiny_demos, tmp_path):
    from agents.training.bc import CarRacingTrainable
    from agents.training.batches import Demos
    from agents.training.labels import SAW

    def gap_windows(arrival: bool) -> tuple[int, int]:
        """(windows whose every gap is 3 steps, windows whose every gap is 1) over an epoch."""
        cfg = _cfg(tiny_demos, tmp_path / "run", stride_jitter=3, regular_share=1.0, arrival_windows=arrival, chunk=8, batch_size=8)
        demos = Demos.load(cfg.data)
        read = demos.episode

        def seen(key: str):  # as if a policy had seen every third frame of each (a perturbed rollout)
            ep = read(key)
            saw = np.where(np.arange(len(ep)) % 3 == 0, 1.0, 0.0).astype(np.float32)
            state = np.full((len(ep), SAW + 1), np.nan, np.float32)
            state[:, : ep.state.shape[1]], state[:, SAW] = ep.state, saw
            return dataclasses.replace(ep, state=state)

        demos.episode = seen
        cfg = TrainConfig.from_dict({**cfg.__dict__, "val_episodes": [sorted(demos.files)[0]]})
        task = CarRacingTrainable(cfg, demos, resume=False)
        ts = torch.cat([task.batch(0, b, torch.device("cpu"))["timestamps"] for b in range(task.batches_per_epoch())]).numpy()
        late = np.round(np.diff(ts[ts[:, 0] > 0], axis=1) * 50).astype(int)  # windows not reaching back past the start
        return int((late == 3).all(1).sum()), int((late == 1).all(1).sum())

    threes, ones = gap_windows(arrival=True)
    assert threes > 0 and ones > 0 and 0.2 < threes / (threes + ones) < 0.45  # a third of the steps were decided on, with gaps of 3
    assert gap_windows(arrival=False)[0] == 0  # without: the regular windows of regular_share 1 everywhere
    with pytest.raises(ConfigError, match="needs --frame-stride 1"):  # strided windows are not the steps it saw: refused, not ignored
        _cfg(tiny_demos, tmp_path / "strided", frame_stride=2, arrival_windows=True)


def test_frame_gaps_left_to_the_recipe_are_the_action_spaces_for_every_head_and_saved_in_the_run(tiny_demos, tiny_demos_continuous, tmp_path):
    """train's default (None) is the recipe's frame gaps for the data's action space, the same for every head, told the
    frames' times or not (agents.training.bc.frame_gaps), written into the run's config; given values win; the default
    epochs are the recipe's 4 behaviour-cloning epochs for CarRacing."""
    cont, disc = batches.Demos.load([tiny_demos_continuous]), batches.Demos.load([tiny_demos])
    for head, demos, want in (("nac", cont, (3, 0.5)), ("cfc", cont, (3, 0.5)), ("gru", cont, (3, 0.5)), ("mha", cont, (3, 0.5)),
                              ("nac", disc, (1, 0.0)), ("lstm", disc, (1, 0.0))):
        cfg = bc.resolve_config(_cfg("d", "r", head=head), demos, None)
        assert (cfg.stride_jitter, cfg.regular_share) == want, head
    given = bc.resolve_config(_cfg("d", "r", head="nac", stride_jitter=2, regular_share=0.0), cont, None)
    assert (given.stride_jitter, given.regular_share) == (2, 0.0)
    assert TrainConfig(data=["d"], out="r").max_epochs == 4 and TrainConfig(data=["d"], out="r", task="udacity").max_epochs == 10
    train(_cfg(tiny_demos_continuous, tmp_path / "run", head="nac", epochs=1), quiet=True)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    assert (saved["stride_jitter"], saved["regular_share"]) == (3, 0.5)


def test_a_network_trained_on_action_rates_learns_them_and_drives_by_diffusing_them(tiny_demos, tiny_demos_continuous, tmp_path):
    from agents.evaluation.evaluate import describe_run
    from nac.driving import DrivingNet, DrivingNetConfig

    # the loss: cross-entropy against the rates, accuracy against the action itself
    net = DrivingNet(DrivingNetConfig(head="gru", window=2, rate_window=2))
    raw = torch.tensor([[0.0, 0.0, 1.0, 2.0, 0.0], [3.0, 0.0, 0.0, 0.0, 0.0]])
    rates = torch.tensor([[0.0, 0.0, 0.4, 0.6, 0.0], [0.2, 0.0, 0.0, 0.8, 0.0]])
    batch = {"actions": torch.tensor([3, 3]), "classes": torch.tensor([3, 3]), "rates": rates}
    per_row, correct = labels.loss_terms(net, raw, batch, None)
    assert torch.allclose(per_row, -(rates * torch.log_softmax(raw, -1)).sum(-1)) and correct.tolist() == [True, False]
    # a run: its targets are the demonstrations' rates, unweighted, and its policy diffuses by default
    train(_cfg(tiny_demos, tmp_path / "run", epochs=1, net={"rate_window": 3}), quiet=True)
    task = bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "x", net={"rate_window": 3}, val_episodes=["demos:0"]),
                            batches.Demos.load([tiny_demos]), False)
    store = task.train_windows.store
    assert task.balance == "none" and np.allclose(task.batches.targets["rates"], store.action_rates(3, 5))
    assert not np.allclose(task.batches.targets["rates"], np.eye(5)[store.actions])  # the expert pulses: rates are not one-hot
    assert DrivingPolicy.from_run(tmp_path / "run").actions == "diffuse" and describe_run(str(tmp_path / "run"), "best").decoder == "diffuse"
    assert DrivingPolicy.from_run(tmp_path / "run", actions="argmax").actions == "argmax"  # asked for: kept
    with pytest.raises(ConfigError, match="rate_window is for discrete actions"):
        train(_cfg(tiny_demos_continuous, tmp_path / "cont", net={"rate_window": 3}), quiet=True)


def test_a_wheel_angle_network_learns_the_experts_plan_and_steers_its_wheels_to_it(tiny_demos, tiny_demos_continuous, tmp_path):
    from agents.carracing.wheel import WheelDecoder, wheel_after
    from agents.evaluation.evaluate import describe_run
    from nac.driving import DrivingNet, DrivingNetConfig

    # the loss: the angle (0.4 tanh) in units of 0.4 and the speed excess in units of 20 u/s, both by squared
    # error; a row is correct when the action decoded at the recorded wheel angle is the expert's, braking
    # where the predicted excess is above 3 u/s
    net = DrivingNet(DrivingNetConfig(head="gru", window=2, wheel_target=True))
    assert net.config.outputs == 2
    raw = torch.tensor([[0.0, 0.25], [float(np.arctanh(0.5)), 0.1], [float(np.arctanh(0.5)), -0.5]])
    batch = {"actions": torch.tensor([4, 2, 1]), "wheel_plan": torch.tensor([0.1, 0.2, 0.2]), "wheel_now": torch.zeros(3),
             "speed_now": torch.full((3,), 50.0), "speed_excess": torch.tensor([0.5, 0.0, -0.5])}
    batch["classes"] = batch["actions"]
    per_row, correct = labels.loss_terms(net, raw, batch, None)
    expected = torch.tensor([(0.1 / 0.4) ** 2 + 0.25**2, 0.1**2, 0.0])
    assert torch.allclose(per_row, expected, atol=1e-5)
    # 0.25 x 20 = 5 u/s above the target: brake; 2 u/s: no brake, and wheels at 0 asked for +0.2 (left): action 2, not 1
    assert correct.tolist() == [True, True, False]
    # balanced (--balance weights): only the excess's error is weighted, by whether the expert brakes
    weighted, _ = labels.loss_terms(net, raw, batch, torch.tensor([0.5, 5.0]))
    assert torch.allclose(weighted, torch.tensor([(0.1 / 0.4) ** 2 + 5.0 * 0.25**2, 0.5 * 0.1**2, 0.0]), atol=1e-5)
    # a run: its targets are the recorded plans and wheel angles, unweighted; its policy steers its wheels
    train(_cfg(tiny_demos, tmp_path / "run", epochs=1, net={"wheel_target": True}), quiet=True)
    task = bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "x", net={"wheel_target": True}, val_episodes=["demos:0"]),
                            batches.Demos.load([tiny_demos]), False)
    store = task.train_windows.store
    assert task.balance == "none"
    balanced = bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "y", net={"wheel_target": True}, val_episodes=["demos:0"], balance="weights"),
                                batches.Demos.load([tiny_demos]), False)
    assert np.array_equal(balanced.class_weights, class_weights(labels.loss_classes(net.config, store.actions)))
    brakes = labels.loss_classes(net.config, np.array([3, 3, 1, 4, 3, 2, 4, 3]))  # the classes balanced: braking or not
    assert brakes.tolist() == [0, 0, 0, 1, 0, 0, 1, 0]
    w = class_weights(brakes)
    assert np.isclose(w[brakes].mean(), 1.0) and np.isclose(w[1] * 2, w[0] * 6)
    assert np.array_equal(task.batches.targets["wheel_plan"], store.state[:, 6]) and np.isfinite(store.state[:, 6]).all()
    assert np.array_equal(task.batches.targets["wheel_now"], store.state[:, 4])
    excess = task.batches.targets["speed_excess"]  # speed above the expert's target, clipped to +-20 u/s, in units of 20
    assert np.allclose(excess, np.clip(store.state[:, 7] / 20.0, -1, 1)) and np.isfinite(excess).all()
    assert excess.min() == -1.0 and (store.state[:, 3][excess > 0.15] > 0).all()  # slow starts: far below; braking: above
    # excess_scale: the excess in units of 5 u/s, clipped to +-5 (training and policy alike)
    narrow = bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "z", net={"wheel_target": True, "excess_scale": 5.0}, val_episodes=["demos:0"]),
                              batches.Demos.load([tiny_demos]), False)
    assert np.allclose(narrow.batches.targets["speed_excess"], np.clip(store.state[:, 7] / 5.0, -1, 1))
    narrow_net = DrivingNet(DrivingNetConfig(head="gru", window=2, wheel_target=True, excess_scale=5.0))
    assert labels.loss_terms(narrow_net, raw, batch, None)[1].tolist() == [False, True, False]  # 0.25 x 5 = 1.25 u/s: no brake
    with pytest.raises(ConfigError, match=r"excess-scale must be a number in \(0, "):
        DrivingNetConfig(wheel_target=True, excess_scale=0.0)
    policy = DrivingPolicy.from_run(tmp_path / "run")
    assert policy.actions == "wheel" and describe_run(str(tmp_path / "run"), "best").decoder == "wheel"
    frames = batches.Demos.load([tiny_demos]).episode("demos:1").frames
    wheel = 0.0
    for f in frames[:20]:
        a = policy.select_action(f)
        assert a in (1, 2, 3, 4) and abs(policy.last["wheel_target"]) <= 0.4
        assert policy.last["brake"] == (a == 4) == (policy.last["speed_excess"] > 3.0)
        wheel = float(wheel_after(wheel, a))
        assert policy.last["wheel"] == wheel  # the policy follows its wheels from its own actions
    looking = DrivingPolicy(DrivingNet(DrivingNetConfig(head="gru", window=2, wheel_target=True, wheel_horizon=4)))
    reference = WheelDecoder(horizon=4)  # the run's decoder is the one its config names, fed the network's outputs
    for f in frames[:20]:
        a = looking.select_action(f)
        assert a == reference(looking.last["wheel_target"], looking.last["speed_excess"])
    from agents.figures.saliency import saliency

    heat = saliency(policy, frames[19], a)  # Grad-CAM of the wheel angle (two outputs: no logit per action)
    assert heat.shape == (96, 96) and np.isfinite(heat).all()
    with pytest.raises(ConfigError, match="--actions wheel is for runs trained with --wheel-target"):
        DrivingPolicy.from_run(tmp_path / "run", actions="argmax")
    from agents.studies.study import eval_episodes

    assert eval_episodes((str(tmp_path / "run"), False, 30, "none", (10000,)))[0]["length"] == 30  # a study drives it by its own decoder
    with pytest.raises(ConfigError, match="--actions wheel is for runs trained with --wheel-target"):
        DrivingPolicy(DrivingNet(DrivingNetConfig(head="gru", window=2)), actions="wheel")
    with pytest.raises(ConfigError, match="wheel_target is for discrete actions"):
        train(_cfg(tiny_demos_continuous, tmp_path / "cont", net={"wheel_target": True}), quiet=True)
    # demonstrations recorded before the plan (6 state columns) or the speed excess (7) were: a clear error, not NaN targets
    for columns in (6, 7):
        old = dataclasses.replace(batches.Demos.load([tiny_demos]).episode("demos:2"), state=store.state[:48, :columns].copy())
        with pytest.raises(DataError, match="have none .first in the episode of seed 2.*record them again"):
            labels.net_targets(net, FrameStore([batches.Demos.load([tiny_demos]).episode("demos:1"), old]))


def test_turn_weight_weights_the_wheel_angle_error_where_the_plan_turns_fast(tiny_demos, tiny_demos_continuous, tmp_path):
    from nac.driving import DrivingNet, DrivingNetConfig

    # the turn rate: |plan(t + 10) - plan(t - 10)| / 20 steps in units of 0.06 rad a step, cut short at an episode's ends
    # and never across two episodes
    plans = [np.r_[np.zeros(20), np.linspace(0.0, 0.24, 9)[1:], np.full(22, 0.24)], np.linspace(0.3, -0.3, 40)]
    eps = [Episode(seed=s, frames=np.zeros((len(p), 96, 96, 3), np.uint8), actions=np.zeros(len(p), np.int64), rewards=np.zeros(len(p), np.float32),
                   terminated=np.zeros(len(p), bool), truncated=np.zeros(len(p), bool), timestamps=np.arange(len(p)) / 50.0,
                   state=np.pad(p[:, None], ((0, 0), (labels.PLAN, 1))).astype(np.float32)) for s, p in enumerate(plans)]
    rates = labels.turn_rates(FrameStore(eps))
    first, second = rates[:50], rates[50:]
    assert np.allclose(first[:10], 0.0) and np.allclose(first[40:], 0.0)  # straight, then a steady bend
    assert np.isclose(first[24], 0.24 / 20 / 0.06)  # the whole 0.24 rad change within the +-10 steps
    assert np.isclose(first[0], 0.0) and np.isclose(first[10], (0.03 / 20) / 0.06)  # one step of the change in reach
    step = 0.6 / 39  # the second episode's plan turns at a steady 0.0154 rad a step, from its first step to its last
    assert np.allclose(second, step / 0.06, atol=1e-6)  # at the ends over fewer steps, the same rate
    # the loss: only the angle's error is weighted, per row
    net = DrivingNet(DrivingNetConfig(head="gru", window=2, wheel_target=True))
    raw = torch.tensor([[0.0, 0.25], [float(np.arctanh(0.5)), 0.1]])
    batch = {"actions": torch.tensor([4, 2]), "wheel_plan": torch.tensor([0.1, 0.3]), "wheel_now": torch.zeros(2),
             "speed_now": torch.full((2,), 50.0), "speed_excess": torch.tensor([0.5, 0.0])}
    batch["classes"] = batch["actions"]
    plain, _ = labels.loss_terms(net, raw, batch, None)
    weighted, _ = labels.loss_terms(net, raw, batch | {"angle_weight": torch.tensor([1.0, 3.0])}, None)
    assert torch.allclose(weighted - plain, torch.tensor([0.0, 2 * (0.1 / 0.4) ** 2]), atol=1e-6)
    # a run's training rows carry 1 + W x the rate; validation is not weighted
    task = bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "x", net={"wheel_target": True}, val_episodes=["demos:0"], turn_weight=4.0),
                            batches.Demos.load([tiny_demos]), False)
    store = task.train_windows.store
    assert np.allclose(task.batches.targets["angle_weight"], 1.0 + 4.0 * labels.turn_rates(store))
    assert task.batches.targets["angle_weight"].max() > 1.0
    assert "angle_weight" not in labels.net_targets(task.net, task.val_windows.store)
    assert "angle_weight" not in bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "y", net={"wheel_target": True}, val_episodes=["demos:0"]),
                                                  batches.Demos.load([tiny_demos]), False).batches.targets
    m = train(_cfg(tiny_demos, tmp_path / "run", epochs=1, net={"wheel_target": True}, turn_weight=4.0), quiet=True)
    assert m["finished"] and json.loads((tmp_path / "run" / "config.json").read_text())["train"]["turn_weight"] == 4.0
    with pytest.raises(ConfigError, match=r"turn-weight must be a number in \[0, "):
        _cfg(tiny_demos, tmp_path / "z", net={"wheel_target": True}, turn_weight=-1.0)
    with pytest.raises(ConfigError, match="it is for wheel-angle networks"):
        _cfg(tiny_demos, tmp_path / "z", turn_weight=1.0)


def test_a_wheel_angle_network_can_learn_the_experts_target_speed_and_read_its_own_off_the_frame(tiny_demos, tmp_path):
    from agents.carracing.wheel import frame_speed
    from nac.driving import DrivingNet, DrivingNetConfig

    # wheel_speed "target": the second output is the expert's target speed, a sigmoid between 20 and 75 u/s; the excess
    # is the car's speed above it (training: the recorded speed; the policy: the frame's speed bar)
    net = DrivingNet(DrivingNetConfig(head="gru", window=2, wheel_target=True, wheel_speed="target"))
    logit = lambda v: float(np.log((v - 20.0) / (75.0 - v)))  # noqa: E731  # the output that asks for target speed v
    excess = net.config.speed_excess(torch.tensor([logit(40.0), logit(70.0), 50.0], dtype=torch.float64), torch.tensor([45.0, 71.0, 80.0]))
    assert np.allclose(excess.numpy(), [5.0, 1.0, 5.0])
    assert float(net.config.speed_excess(torch.tensor(-50.0), torch.tensor(0.0))) == -20.0  # never below the expert's least
    # the loss: the implied excess's error in units of 20 u/s, censored where the label is clipped (far below the target,
    # any excess below -20 u/s is right; far above it, any above +20)
    raw = torch.tensor([[0.0, logit(40.0)], [0.0, logit(40.0)], [0.0, logit(70.0)], [0.0, logit(60.0)], [0.0, logit(70.0)]])
    batch = {"actions": torch.tensor([4, 3, 0, 3, 3]), "wheel_plan": torch.zeros(5), "wheel_now": torch.zeros(5),
             "speed_now": torch.tensor([45.0, 41.0, 71.0, 30.0, 30.0]), "speed_excess": torch.tensor([0.25, 0.0, 0.05, -1.0, -1.0])}
    per_row, correct = labels.loss_terms(net, raw, batch, None)
    # row 3: 30 - 60 = -30 u/s, beyond the clip like its label: no error; row 4: -40, likewise
    assert torch.allclose(per_row, torch.tensor([0.0, 0.05**2, 0.0, 0.0, 0.0]), atol=1e-5)
    batch["speed_excess"][3] = -0.5  # had the label been -10 u/s, the -30 would be 1 unit off
    assert torch.isclose(labels.loss_terms(net, raw, batch, None)[0][3], torch.tensor(1.0), atol=1e-4)
    # 45 - 40 = 5 u/s above: brake; 41 - 40 = 1: coast (no gas above the target), not gas; 71 - 70 = 1: coast
    assert correct.tolist()[:3] == [True, False, True]
    task = bc.CarRacingTrainable(_cfg(tiny_demos, tmp_path / "x", net={"wheel_target": True, "wheel_speed": "target"},
                                 val_episodes=["demos:0"]), batches.Demos.load([tiny_demos]), False)
    state = task.train_windows.store.state
    assert np.array_equal(task.batches.targets["speed_now"], state[:, 3])
    assert np.allclose(task.batches.targets["speed_excess"], np.clip(state[:, 7] / 20.0, -1, 1))  # the same label as "excess"
    with pytest.raises(DataError, match="outside the network's target_speeds 20..60"):
        labels.net_targets(DrivingNet(DrivingNetConfig(head="gru", window=2, wheel_target=True, wheel_speed="target", target_speeds=(20, 60))),
                       task.train_windows.store)
    train(_cfg(tiny_demos, tmp_path / "run", epochs=1, net={"wheel_target": True, "wheel_speed": "target"}), quiet=True)
    policy = DrivingPolicy.from_run(tmp_path / "run")
    assert policy.cfg.target_speeds == (20.0, 75.0)  # read back from config.json
    outs, readout = [], policy.net.readout
    policy.net.readout = lambda h: outs.append(readout(h)) or outs[-1]  # the network's raw outputs, as the policy got them
    reads = []
    for f in batches.Demos.load([tiny_demos]).episode("demos:1").frames[:40]:
        a = policy.select_action(f)
        reads.append(policy.last["speed_read"])
        assert reads[-1] == frame_speed(f)  # the speed the policy drives on is the bar's
        target = 20.0 + 55.0 * float(torch.sigmoid(outs[-1][0, 1]))
        assert np.isclose(policy.last["speed_excess"], reads[-1] - target, atol=1e-4)
        assert policy.last["brake"] == (a == 4) == (policy.last["speed_excess"] > 3.0)
    assert reads[0] < 5.0 < reads[-1]  # the expert's episode starts from standstill
    with pytest.raises(ConfigError, match="wheel_speed must be one of excess, target"):
        DrivingNetConfig(wheel_target=True, wheel_speed="speed")
    with pytest.raises(ConfigError, match="wheel_speed is for wheel-angle networks"):
        DrivingNetConfig(wheel_speed="target")
    with pytest.raises(ConfigError, match="target_speeds must be two speeds"):
        DrivingNetConfig(wheel_target=True, wheel_speed="target", target_speeds=(75, 20))


def test_training_with_shift_sees_shifted_frames_and_keeps_its_labels(tmp_path, tiny_demos_continuous):
    cfg = TrainConfig(data=[tiny_demos_continuous], out=str(tmp_path / "r"), head="gru", window=2, epochs=1, shift=4, seed=3)
    demos = batches.Demos.load(cfg.data)
    cfg = bc.resolve_config(cfg, demos, None)
    task = bc.CarRacingTrainable(cfg, demos, resume=False)
    plain = bc.CarRacingTrainable(dataclasses.replace(cfg, shift=0), demos, resume=False)
    a, b = task.batch(0, 0, torch.device("cpu")), plain.batch(0, 0, torch.device("cpu"))
    assert torch.equal(a["actions"], b["actions"]) and torch.equal(a["index"], b["index"])
    assert a["frames"].shape == b["frames"].shape and not torch.equal(a["frames"], b["frames"])
    with pytest.raises(ConfigError, match="shift must be a whole number in 0..16"):
        TrainConfig(data=["x"], out="y", shift=40)
    for kind in ("jitter", "randconv", "randmix", "colour", "overlay"):  # an augmentation changes the scene of some frames, never the labels
        c = bc.CarRacingTrainable(dataclasses.replace(cfg, shift=0, augment=kind), demos, resume=False).batch(0, 0, torch.device("cpu"))
        assert torch.equal(c["actions"], b["actions"]) and torch.equal(c["frames"][:, 84:], b["frames"][:, 84:])
        assert not torch.equal(c["frames"], b["frames"]), kind


def test_consistency_trains_each_window_clean_and_augmented_and_matches_their_features(tmp_path, tiny_demos_continuous):
    cfg = TrainConfig(data=[tiny_demos_continuous], out=str(tmp_path / "r"), head="gru", window=2, epochs=1, seed=3)
    demos = batches.Demos.load(cfg.data)
    cfg = bc.resolve_config(cfg, demos, None)
    plain = bc.CarRacingTrainable(cfg, demos, resume=False).batch(0, 0, torch.device("cpu"))
    task = bc.CarRacingTrainable(dataclasses.replace(cfg, augment="randmix", consistency=0.5), demos, resume=False)
    two = task.batch(0, 0, torch.device("cpu"))
    u, n = len(plain["frames"]), len(plain["actions"])
    assert torch.equal(two["frames"][:u], plain["frames"])  # the clean view is the plain batch
    views = two["frames"][u:]
    assert (views[:, :84] != plain["frames"][:, :84]).flatten(1).any(1).all()  # every frame augmented in the other view
    assert torch.equal(views[:, 84:], plain["frames"][:, 84:])
    assert torch.equal(two["index"], torch.cat([plain["index"], plain["index"] + u]))  # the same windows on the augmented frames
    for k in ("actions", "timestamps"):
        assert torch.equal(two[k], torch.cat([plain[k], plain[k]]))
    torch.manual_seed(0)
    task.net.eval()  # no dropout: the two computations below see the same network
    loss, figures = task.loss(task.net, two, torch.device("cpu"))
    raw, feats = task.net(two["frames"], two["timestamps"], two["index"], features=True)
    assert feats.shape[0] == 2 * u
    bc_part = labels.loss_terms(task.net, raw, two, None)[0].mean()
    match = (feats[u:] - feats[:u]).pow(2).mean() / feats[:u].var(0, unbiased=False).mean()
    assert torch.allclose(figures["match"], match) and torch.allclose(loss, bc_part + 0.5 * match)
    # scale-free: features scaled alike in both views match no better nor worse (raw, ten times the features is 100 times the distance)
    assert torch.allclose(bc.feature_match(feats[:u] * 10, feats[u:] * 10), match, rtol=1e-4)
    assert float(bc.feature_match(feats[:u], feats[:u])) == 0.0
    assert n == len(two["actions"]) // 2
    metrics = train(dataclasses.replace(cfg, augment="randmix", consistency=0.5, out=str(tmp_path / "c")), quiet=True)
    assert np.isfinite(metrics["best"]["val_loss"])


def test_batches_made_ahead_are_the_batches_made_when_asked(tiny_demos_continuous, tmp_path):
    """The loop prepares batches in a thread of its own, ahead of the steps: the same batches, augmentation and
    irregular frame gaps included, as the step would make for itself (a batch is a function of (epoch, b))."""
    from agents.training.loop import prepared

    cfg = TrainConfig(data=[tiny_demos_continuous], out=str(tmp_path / "r"), head="nac", window=4, epochs=1, seed=2,
                      shift=2, augment="overlay", batch_size=8, chunk=4)
    demos = batches.Demos.load(cfg.data)
    cfg = bc.resolve_config(cfg, demos, None)
    assert cfg.stride_jitter == 3  # NAC's continuous recipe: the frame-gap mix, drawn per batch
    n = bc.CarRacingTrainable(cfg, demos, resume=False).batches_per_epoch()
    cpu = torch.device("cpu")
    got = {ahead: [(b, batch) for epoch in (0, 1) for b, batch, _ in
                   prepared(bc.CarRacingTrainable(cfg, demos, resume=False), epoch, list(range(n)), cpu, ahead)] for ahead in (0, 3)}
    assert len(got[0]) == len(got[3]) == 2 * n
    for (b0, x), (b3, y) in zip(got[0], got[3]):
        assert b0 == b3 and x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
