"""Evaluation videos: they decode back, overlays survive edge cases, evaluation renders nothing."""

import imageio.v3 as iio
import numpy as np
import pytest
import torch

from agents.driving.policy import DrivingPolicy
from agents.figures.saliency import saliency
from agents.figures.video import CAM, HOLD_SECONDS, TILE_W, Driver, RecordConfig, overlay, record_video
from nac import ConfigError
from nac.driving import DrivingNet, DrivingNetConfig


def _run(tmp_path, head, **kw):
    torch.manual_seed(0)
    DrivingNet(DrivingNetConfig(head=head, window=3, **kw)).save(tmp_path / head, "best", {"train": {}})
    return str(tmp_path / head)


def test_a_video_decodes_with_the_expected_frames_and_size(tmp_path):
    run = _run(tmp_path, "nac")
    out = tmp_path / "v.mp4"
    result = record_video(RecordConfig(out=str(out), runs=[run], seed=3, max_steps=20))
    frames = iio.imread(out)
    assert frames.shape == (20 + int(HOLD_SECONDS * 50), CAM, TILE_W, 3)
    assert len(result["episodes"]) == 1


def test_compare_puts_two_drivers_side_by_side_on_the_same_track(tmp_path):
    a, b = _run(tmp_path, "nac"), _run(tmp_path, "lstm")
    out = tmp_path / "cmp.mp4"
    result = record_video(RecordConfig(out=str(out), runs=[a, b], seed=3, max_steps=15, saliency=False))
    frames = iio.imread(out)
    assert frames.shape[1:] == (CAM, 2 * TILE_W, 3)
    assert set(result["episodes"][0]) == {"seed", "nac", "lstm"}
    # the first frame of both is the same track from the same seed: the camera halves match
    assert np.abs(frames[0, :, :CAM].astype(int) - frames[0, :, TILE_W : TILE_W + CAM].astype(int)).mean() < 25


def test_the_expert_can_be_recorded(tmp_path):
    out = tmp_path / "expert.mp4"
    record_video(RecordConfig(out=str(out), expert="track", continuous=True, seed=1, max_steps=10))
    assert iio.imread(out).shape[0] == 10 + int(HOLD_SECONDS * 50)


def test_overlays_survive_a_short_window_a_black_frame_and_a_recurrent_head(tmp_path):
    for head in ("nac", "gru"):
        policy = DrivingPolicy.from_run(_run(tmp_path, head))
        black = np.zeros((96, 96, 3), np.uint8)
        action = policy.select_action(black)  # first step: the window is the first frame repeated
        heat = saliency(policy, black, action)
        assert heat.shape == (96, 96) and np.isfinite(heat).all() and heat.min() >= 0 and heat.max() <= 1
        weights = None
        if policy.net.head.is_attention:
            feats, times = policy.window()
            t_head = policy.net.head_time(times)
            eff = policy.net.head.last_step_attention(feats, t_head)[0].detach().numpy()
            soft = policy.net.head.last_step_attention(feats, t_head, effective=False)[0].detach().numpy()
            assert eff.shape == soft.shape == (3,)
            assert soft.sum() == pytest.approx(1.0, abs=1e-5)  # the softmax, averaged over heads
            assert (eff <= soft + 1e-6).all() and eff.sum() < 1.0  # effective = softmax x t_ij, t_ij < 1
            weights = np.stack([eff, soft])
        else:
            assert policy.net.head.last_step_attention(*policy.window()) is None  # no attention strip
        tile = overlay(Driver(head, policy, None), black, action, 0.0, heat, weights, [black] * 3 if weights is not None else None)
        assert tile.shape == (CAM, TILE_W, 3) and tile.dtype == np.uint8


def test_bad_record_requests_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="give a run folder"):
        record_video(RecordConfig(out=str(tmp_path / "x.mp4")))
    with pytest.raises(ConfigError, match=".mp4"):
        record_video(RecordConfig(out=str(tmp_path / "x.avi"), expert="track"))


def test_evaluation_does_no_rendering_work(tmp_path, monkeypatch):
    """nacdrive evaluate (in-process with one worker here) draws no window view, computes no gradient (saliency) and
    makes no picture: what a video does, an evaluation leaves out."""
    import PIL.Image
    from gymnasium.envs.box2d.car_racing import CarRacing

    from agents.evaluation.evaluate import EvaluateConfig, evaluate

    def boom(*a, **k):
        raise AssertionError("rendering during evaluation")

    monkeypatch.setattr(CarRacing, "render", boom)  # the view a video shows (FastCarRacing's too: it inherits it)
    monkeypatch.setattr(torch.Tensor, "backward", boom)  # Grad-CAM's gradients
    monkeypatch.setattr(PIL.Image, "fromarray", boom)  # overlays and text
    rows = evaluate(EvaluateConfig(runs=[_run(tmp_path, "nac")], episodes=1, workers=1, max_steps=5, expert=False))
    assert rows[0]["episodes"] == 1
    with pytest.raises(AssertionError, match="rendering during evaluation"):  # the patches do see a recording's work
        record_video(RecordConfig(out=str(tmp_path / "v.mp4"), runs=[_run(tmp_path, "gru")], seed=3, max_steps=3))


def test_a_recorded_udacity_drive_renders_with_its_controls(tmp_path):
    from pathlib import Path

    from agents.figures.video import record_udacity

    real = Path(__file__).parents[2] / "data" / "udacity-real"
    r = record_udacity(str(real), str(tmp_path / "ud.mp4"))
    frames = iio.imread(tmp_path / "ud.mp4")
    assert frames.shape == (20, 320, 896, 3) and r["frames"] == 20 and 5 <= r["fps"] <= 60
