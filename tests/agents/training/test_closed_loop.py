"""Closed-loop selection (agents.training.closed_loop): the weights kept are those that drove best."""

import pytest
import torch
from safetensors.torch import load_file

from agents.training import bc
from agents.training.trainers import train
from agents.training.loop import TrainConfig
from agents.driving.policy import load_run


def _cfg(demos: str, out, epochs: int) -> TrainConfig:
    return TrainConfig(data=[demos], out=str(out), head="gru", window=2, epochs=epochs, batch_size=8, lr=3e-3, select_episodes=2,
                       select_steps=150, seed=3)


def test_closed_loop_selection_keeps_the_weights_that_drove_best(tmp_path, tiny_demos_continuous):
    from agents.training.closed_loop import closed_loop_return
    from agents.evaluation.evaluate import describe_run

    out = tmp_path / "sel"
    m = train(_cfg(tiny_demos_continuous, out, 2), quiet=True)
    returns = [r["val_return"] for r in m["history"]]
    assert len(returns) == 2 and m["best"]["val_return"] == max(returns)
    # best.safetensors is those weights: driving them again gives the same return
    assert closed_loop_return(load_run(out, "best"), [20_000, 20_001], 150) == pytest.approx(max(returns))
    assert {20_000, 20_001} <= set(describe_run(str(out), "best").training_seeds)  # not held out any more


def test_the_return_chooses_the_best_weights_not_the_validation_loss(tmp_path, tiny_demos_continuous, monkeypatch):
    """With the validation scripted (the first epoch drives best and has the highest loss), the run keeps the first epoch's
    weights, where the loss would choose the second's."""
    scripted, losses = iter([5.0, 1.0, 3.0]), iter([0.9, 0.5, 0.7])
    monkeypatch.setattr(bc, "closed_loop_return", lambda *args: next(scripted))
    monkeypatch.setattr(bc, "validate", lambda *args, **kw: {"val_loss": next(losses), "val_accuracy": 0.5})
    m = train(_cfg(tiny_demos_continuous, tmp_path / "three", 3), quiet=True)
    assert [r["val_return"] for r in m["history"]] == [5.0, 1.0, 3.0] and m["best"]["val_return"] == 5.0
    monkeypatch.setattr(bc, "closed_loop_return", lambda *args: 0.0)
    monkeypatch.setattr(bc, "validate", lambda *args, **kw: {"val_loss": 0.1, "val_accuracy": 0.5})
    train(_cfg(tiny_demos_continuous, tmp_path / "one", 1), quiet=True)  # the same run stopped after its first epoch
    best, first = load_file(str(tmp_path / "three" / "best.safetensors")), load_file(str(tmp_path / "one" / "last.safetensors"))
    assert all(torch.equal(best[k], first[k]) for k in first)
