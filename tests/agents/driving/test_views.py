"""Random convolutions: their weights, a frame seen through one, and the policy that averages its readouts over
several of them at drive time (DrivingNetConfig.drive_average)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from agents.driving import views
from agents.driving.policy import DrivingPolicy
from datasets.demos import DemoSet
from nac.driving import DrivingNet, DrivingNetConfig


def test_mixed_weights_are_the_identity_and_xavier_mixed_by_a_share_drawn_for_each():
    w = views.randconv_weights(2000, np.random.default_rng(0), mixed=True)
    again = np.random.default_rng(0)
    xavier = again.normal(0, views.XAVIER_STD, (2000, 3, 3, 3, 3))
    alpha = again.uniform(0, 1, 2000)[:, None, None, None, None]
    assert np.allclose(w, alpha * views.IDENTITY + (1 - alpha) * xavier)
    assert views.IDENTITY.sum() == 3 and (views.IDENTITY[[0, 1, 2], [0, 1, 2], 1, 1] == 1).all()  # each channel to itself
    assert 0.45 < alpha.mean() < 0.55  # U(0, 1): from barely changed to fully random
    assert np.allclose(views.randconv_weights(5, np.random.default_rng(1), mixed=False),
                       np.random.default_rng(1).normal(0, views.XAVIER_STD, (5, 3, 3, 3, 3)))  # unmixed: Xavier alone
    # the identity convolution leaves a frame as it is; a share of it keeps that share of the frame
    x = torch.rand(2, 10, 12, 3)
    assert torch.allclose(views.convolve(x, np.stack([views.IDENTITY] * 2)), x, atol=1e-6)
    half = views.convolve(x, np.stack([0.5 * views.IDENTITY + 0.5 * xavier[0]] * 2))
    assert torch.allclose(half, 0.5 * x + 0.5 * views.convolve(x, np.stack([xavier[0]] * 2)), atol=1e-5)


def test_a_frame_seen_through_a_convolution_keeps_its_instruments():
    frames = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (3, 96, 96, 3), dtype=np.uint8))
    w = views.randconv_weights(3, np.random.default_rng(2), mixed=False)
    out = views.seen_through(frames, w)
    assert out.dtype == torch.uint8 and torch.equal(out[:, views.SCENE_ROWS:], frames[:, views.SCENE_ROWS:])
    assert (out[:, :views.SCENE_ROWS] != frames[:, :views.SCENE_ROWS]).flatten(1).any(1).all()
    assert torch.equal(views.seen_through(frames, np.stack([views.IDENTITY] * 3)), frames)


def test_the_averaging_policy_is_the_mean_of_one_stream_per_view(tiny_demos):
    """drive_average M: each episode's frames go through its M convolutions (drawn from its seed), one head stream per
    view, the readouts averaged; the same as M policies each driven on one view's frames."""
    torch.manual_seed(0)
    cfg = DrivingNetConfig(head="gru", window=3, action_space="continuous")
    net = DrivingNet(cfg).eval()
    averaging = DrivingNet(dataclasses.replace(cfg, drive_average=3)).eval()
    averaging.load_state_dict(net.state_dict())
    frames = DemoSet(tiny_demos).load()[0].frames[:12]
    seeds = [7, 8]
    pol = DrivingPolicy(averaging)
    pol.reset_batch(seeds)
    got = np.stack([pol.raw_output(np.stack([f, f[::-1].copy()])).numpy() for f in frames])  # (T, 2, A)
    for e, seed in enumerate(seeds):
        w = views.randconv_weights(3, np.random.default_rng([views.VIEWS_SEED, seed]), mixed=True)
        outs = []
        for m in range(3):
            one = DrivingPolicy(net)
            seen = views.seen_through(torch.from_numpy(np.stack([f if e == 0 else f[::-1].copy() for f in frames])), w[m : m + 1].repeat(12, 0))
            outs.append(np.stack([one.raw_output(s[None].numpy())[0].numpy() for s in seen]))
        assert np.allclose(got[:, e], np.mean(outs, axis=0), atol=1e-5)
    pol.reset_batch(seeds)  # the views come from the episodes' seeds alone
    assert np.allclose(pol.raw_output(np.stack([frames[0], frames[0][::-1].copy()])).numpy(), got[0], atol=1e-6)
    plain = DrivingPolicy(net)
    plain.reset_batch(seeds)
    assert not np.allclose(plain.raw_output(np.stack([frames[0], frames[0][::-1].copy()])).numpy(), got[0], atol=1e-3)
    action = DrivingPolicy(averaging)
    action.reset(7)
    assert np.asarray(action.select_action(frames[0])).shape == (3,)  # one action per episode, whatever the views
