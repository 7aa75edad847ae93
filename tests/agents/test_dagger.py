"""DAgger: policy rollouts labelled by the expert, added to the run's data, and training on."""

import json

import numpy as np
import pytest

from agents.tasks import train
from agents.training import TrainConfig
from agents.dagger import DaggerConfig, MixedDriver, dagger
from datasets.demos import DemoSet
from nac import ConfigError


class _Fixed:
    def __init__(self, action):
        self.action, self.seen = action, 0

    def reset(self):
        self.seen = 0

    def select_action(self, obs):
        self.seen += 1
        return self.action


def test_beta_mixing_executes_the_expert_that_often_and_both_see_every_frame():
    policy, expert = _Fixed(1), _Fixed(3)
    mix = MixedDriver(policy, expert, beta=0.25, seed=0)
    executed = [mix.select_action(None) for _ in range(2000)]
    assert mix.label == 3 and policy.seen == expert.seen == 2000
    assert np.mean(np.array(executed) == 3) == pytest.approx(0.25, abs=0.03)


def test_a_round_records_expert_labels_and_trains_on(tiny_demos, tmp_path):
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    state = dagger(DaggerConfig(run=str(run), rounds=1, episodes=2, epochs=1, workers=1, max_steps=40), quiet=True)
    assert len(state["rounds"]) == 1 and state["rounds"][0]["trained"] and state["rounds"][0]["beta"] == 0.5
    demos = DemoSet(run / "dagger")
    assert demos.seeds() == [1_000_000, 1_000_001]
    ep = demos.load()[0]
    assert len(ep) == 40 and set(np.unique(ep.actions)) <= set(range(5))
    cfg = json.loads((run / "config.json").read_text())
    assert str(run / "dagger") in cfg["train"]["data"]
    assert "dagger:1000000" in cfg["data"]["episodes"]  # evaluation will refuse these seeds
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["best"]["epoch"] == 2  # best chosen after the round
    # running it again with the same rounds does nothing more; one more round adds episodes
    again = dagger(DaggerConfig(run=str(run), rounds=1, episodes=2, epochs=1, workers=1, max_steps=40), quiet=True)
    assert len(again["rounds"]) == 1 and len(DemoSet(run / "dagger").seeds()) == 2


def test_dagger_needs_a_training_run(tmp_path):
    with pytest.raises(ConfigError, match="not a training run"):
        dagger(DaggerConfig(run=str(tmp_path)))
    with pytest.raises(ConfigError, match="beta must be in"):
        DaggerConfig(run="x", beta=1.5)
    with pytest.raises(ConfigError, match="off-road steps must be >= 0"):
        DaggerConfig(run="x", off_road_steps=-1)
