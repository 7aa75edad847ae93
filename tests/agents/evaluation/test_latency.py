"""Policy latency (agents.evaluation.latency): the frames a real episode shows, and step percentiles after a warm-up."""

import numpy as np
import pytest

from agents.evaluation.latency import bench_policies, camera_frames, percentiles


def test_percentiles_are_numpys_over_the_steps_given():
    p = percentiles(list(range(1, 101)))
    assert p["steps"] == 100 and p["p50_ms"] == pytest.approx(50.5) and p["p99_ms"] == pytest.approx(99.01) and p["max_ms"] == 100


def test_a_shipped_policy_and_an_untrained_head_are_timed_on_the_same_frames():
    frames = camera_frames(70)
    assert frames.shape == (70, 96, 96, 3) and frames.dtype == np.uint8 and not np.array_equal(frames[0], frames[-1])  # it drove
    rows = bench_policies(["agents/pretrained/gru"], ["nac"], steps=70)
    assert [r["policy"] for r in rows] == ["agents/pretrained/gru", "untrained nac"] and [r["head"] for r in rows] == ["gru", "nac"]
    assert all(r["steps"] == 20 and 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"] for r in rows)  # 70 steps less 50 of warm-up
