"""The shipped policies load from their folders alone and drive; their training seeds are refused."""

from pathlib import Path

import numpy as np
import pytest

from agents.evaluate import EvaluateConfig, describe_run, evaluate
from agents.policy import DrivingPolicy
from nac import ConfigError

PRETRAINED = Path(__file__).parents[2] / "agents" / "pretrained"
HEADS = ["nac", "lstm", "gru", "cfc", "mha"]


@pytest.mark.parametrize("head", HEADS)
def test_a_shipped_policy_rebuilds_and_acts(head):
    policy = DrivingPolicy.from_run(PRETRAINED / head)
    assert policy.net.config.head == head and policy.continuous
    action = policy.select_action(np.full((96, 96, 3), 100, np.uint8))
    assert action.shape == (3,) and -1 <= action[0] <= 1
    info = describe_run(str(PRETRAINED / head), "best")
    assert set(range(50)) <= set(info.training_seeds) and info.val_accuracy > 0.8


def test_their_training_seeds_are_refused():
    with pytest.raises(ConfigError, match="include training episodes"):
        evaluate(EvaluateConfig(runs=[str(PRETRAINED / "nac")], episodes=2, seed_start=48, workers=1, max_steps=5))
