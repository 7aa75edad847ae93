"""Closed-loop selection (agents.training.closed_loop): the weights kept are those that drove best."""

import numpy as np
import pytest

from agents.training.trainers import train
from agents.training.loop import TrainConfig
from agents.driving.policy import load_run


def test_closed_loop_selection_keeps_the_weights_that_drove_best(tmp_path, tiny_demos_continuous):
    from agents.training.closed_loop import closed_loop_return
    from agents.evaluation.evaluate import describe_run

    out = tmp_path / "sel"
    cfg = TrainConfig(data=[tiny_demos_continuous], out=str(out), head="gru", window=2, epochs=3, batch_size=8,
                      lr=3e-3, select_episodes=2, select_steps=150, seed=3)
    m = train(cfg, quiet=True)
    returns = [r["val_return"] for r in m["history"]]
    losses = [r["val_loss"] for r in m["history"]]
    assert len(returns) == 3 and np.argmax(returns) != np.argmin(losses)  # here the two criteria disagree
    assert m["best"]["val_return"] == max(returns)  # chosen by driving, not by the validation loss
    # best.safetensors is those weights: driving them again gives the same return
    assert closed_loop_return(load_run(out, "best"), [20_000, 20_001], 150) == pytest.approx(max(returns))
    assert {20_000, 20_001} <= set(describe_run(str(out), "best").training_seeds)  # not held out any more
