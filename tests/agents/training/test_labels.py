"""What a CarRacing network learns (agents.training.labels): action classes and their balance, the l1 loss, the brake gate."""

import numpy as np
import pytest
import torch

from agents.training import labels
from agents.training.batches import Batches
from agents.training.labels import action_classes, class_weights
from agents.training.loop import TrainConfig
from datasets.demos import Episode
from datasets.windows import FrameStore, FrameWindows
from nac import ConfigError


def test_class_balance_by_weights_and_by_sampling():
    classes = np.array([3] * 90 + [1] * 8 + [4] * 2)
    w = class_weights(classes)
    assert w[0] == 0 and w[3] < w[1] < w[4]
    assert np.isclose(w[classes].mean(), 1.0)
    n = 400
    actions = np.where(np.arange(n) % 10 == 0, 1, 3)  # 10 % steering, 90 % gas
    ep = Episode(0, np.zeros((n, 8, 8, 3), np.uint8), actions, np.zeros(n, np.float32), np.zeros(n, bool),
                 np.zeros(n, bool), np.arange(n) / 50.0, np.zeros((n, 6), np.float32))
    store = FrameStore([ep])
    cls = action_classes(store.actions)
    sampled = Batches(FrameWindows(store, 4), 1, 1, class_weights(cls)[cls])
    drawn = np.bincount(cls[sampled.starts[sampled.order(0, 0)]], minlength=5)
    assert 0.35 < drawn[1] / drawn.sum() < 0.65  # balanced: about half steering, not 10 %
    plain = Batches(FrameWindows(store, 4), 1, 1, None)
    assert sorted(plain.order(0, 0).tolist()) == list(range(n))  # without balance: each step once


def test_continuous_actions_map_to_what_the_step_does():
    a = np.array([[0.0, 1.0, 0.0], [-0.5, 0.2, 0.0], [0.6, 0.0, 0.0], [0.0, 0.0, 0.8], [0.0, 0.0, 0.0]], np.float32)
    assert action_classes(a).tolist() == [3, 2, 1, 4, 0]


def test_the_l1_loss_is_the_mean_absolute_error():
    from nac.driving import DrivingNet, DrivingNetConfig

    net = DrivingNet(DrivingNetConfig(head="gru", action_space="continuous", window=2, num_heads=4))
    target = torch.tensor([[0.5, 0.8, 0.0], [-0.5, 0.2, 0.0], [0.0, 1.0, 0.9]])
    batch = {"actions": target, "classes": torch.from_numpy(action_classes(target.numpy()))}
    raw = torch.zeros(3, 3)  # squashed: steer 0, gas 0.5, brake 0.5
    pred = net.squash(raw)
    mse, _ = labels.loss_terms(net, raw, batch, None, "mse")
    l1, _ = labels.loss_terms(net, raw, batch, None, "l1")
    assert torch.allclose(mse, ((pred - target) ** 2).mean(-1)) and torch.allclose(l1, (pred - target).abs().mean(-1))
    with pytest.raises(ConfigError, match="loss must be one of"):
        TrainConfig(data=["x"], out="y", loss="huber")


def test_the_brake_gate_brakes_only_where_its_logit_says():
    from nac.driving import DrivingNet, DrivingNetConfig

    net = DrivingNet(DrivingNetConfig(head="gru", action_space="continuous", window=2, brake_gate=True))
    assert net.out.out_features == 4
    raw = torch.tensor([[0.0, 0.0, 2.0, -1.0], [0.0, 0.0, 2.0, 1.0]])  # the same brake output, the gate off / on
    act = net.squash(raw)
    assert act.shape == (2, 3) and act[0, 2] == 0 and act[1, 2] == pytest.approx(torch.sigmoid(torch.tensor(2.0)).item())
    # the loss: cross-entropy of the gate against (brake > BRAKE_ON), the brake's error only where the expert brakes
    target = torch.tensor([[0.0, 0.5, 0.0], [0.0, 0.5, 0.8]])
    batch = {"actions": target, "classes": torch.from_numpy(action_classes(target.numpy()))}
    per_row, _ = labels.loss_terms(net, raw, batch, None)
    soft = torch.sigmoid(torch.tensor(2.0))
    bce = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor([-1.0, 1.0]), torch.tensor([0.0, 1.0]), reduction="none")
    expected = torch.stack([torch.tensor(0.0), (soft - 0.8) ** 2]) / 3 + bce
    assert torch.allclose(per_row, expected, atol=1e-6)
    with pytest.raises(ConfigError, match="brake_gate is for continuous"):
        DrivingNetConfig(head="gru", brake_gate=True)
