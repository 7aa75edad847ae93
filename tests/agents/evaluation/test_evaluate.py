"""Closed-loop evaluation: the leaderboard's figures, held-out seeds, interrupted runs."""

import json

import numpy as np
import pytest
import torch

from agents.evaluation import evaluate as ev
from agents.training.trainers import train
from agents.training.loop import TrainConfig
from agents.evaluation.evaluate import EvaluateConfig, evaluate, robustness_points, to_markdown, write_leaderboard
from nac import ConfigError


@pytest.fixture(scope="module")
def two_runs(tiny_demos, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for head in ("gru", "nac"):
        train(TrainConfig(data=[tiny_demos], out=str(root / head), head=head, window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    return [str(root / "gru"), str(root / "nac")]


def test_a_leaderboard_ranks_runs_on_the_same_seeds_with_the_expert(two_runs, tmp_path):
    rows = evaluate(EvaluateConfig(runs=two_runs, episodes=2, seed_start=500, workers=1, max_steps=60))
    assert len(rows) == 3
    assert {r["tracks"] for r in rows} == {"tracks 500..501"}  # neither the validation nor the test range: named as such
    assert [r["mean_return"] for r in rows] == sorted((r["mean_return"] for r in rows), reverse=True)
    by_run = {r["run"]: r for r in rows}
    expert = by_run["expert:track (discrete)"]
    for path in two_runs:
        r = by_run[path]
        assert r["seeds"] == [500, 501] == expert["seeds"]
        assert r["mean_return"] == pytest.approx(np.mean(r["returns"]))
        assert r["std_return"] == pytest.approx(np.std(r["returns"], ddof=1))
        assert r["latency_p50_ms"] > 0 and r["latency_p99_ms"] >= r["latency_p50_ms"]
        # the interval is Student's t about the mean of the two returns (t at 1 degree of freedom: 12.706)
        half = 12.706 * np.std(r["returns"], ddof=1) / np.sqrt(2)
        assert (r["ci95_low"], r["ci95_high"]) == pytest.approx((r["mean_return"] - half, r["mean_return"] + half), rel=1e-3)
        assert 0 < r["tiles_share"] < 1  # 60 steps reach some tiles of a track, never all of them
    write_leaderboard(rows, tmp_path / "lb.json")
    data = json.loads((tmp_path / "lb.json").read_text())
    assert isinstance(data, list) and {"run", "mean_return", "std_return", "returns"} <= set(data[0])
    table = to_markdown(rows)
    assert table.count("\n") == 4 and "expert:track" in table


def test_training_seeds_are_refused(two_runs):
    with pytest.raises(ConfigError, match="include training episodes"):
        evaluate(EvaluateConfig(runs=two_runs[:1], episodes=3, seed_start=0, workers=1, max_steps=10))


def test_an_interrupted_evaluation_keeps_the_finished_episodes(two_runs, monkeypatch):
    real = ev.drive
    calls = {"n": 0}

    def drive(job):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(ev, "drive", drive)
    with pytest.raises(KeyboardInterrupt) as exc:
        evaluate(EvaluateConfig(runs=two_runs, episodes=2, seed_start=500, workers=1, max_steps=30, batch=1))
    partial = exc.value.partial
    assert sum(r["episodes"] for r in partial) == 2


def test_not_a_run_is_a_clear_error(tmp_path, tiny_demos):
    with pytest.raises(FileNotFoundError, match="config.json"):
        evaluate(EvaluateConfig(runs=[str(tmp_path)], episodes=1, workers=1))
    with pytest.raises(ConfigError, match="weights must be one of"):
        EvaluateConfig(runs=["x"], weights="final")


def test_robustness_points_put_the_clean_row_at_level_zero_of_every_kind():
    def row(run, pert, mean, reference=False):
        return {"run": run, "head": "nac", "perturbation": pert, "mean_return": mean, "ci95_low": mean - 1, "ci95_high": mean + 1, "reference": reference}

    rows = [
        row("a", "none", 900.0), row("a", "drop=0.4", 500.0), row("a", "drop=0.2", 700.0), row("a", "delay=2", 600.0),
        row("b", "none", 800.0), row("b", "drop=0", 810.0), row("b", "drop=0.2", 650.0),
        row("expert", "none", 930.0, reference=True),
    ]
    points = robustness_points(rows)
    assert list(points) == ["delay", "drop"]
    assert [p[:2] for p in points["drop"]["a"]] == [(0.0, 900.0), (0.2, 700.0), (0.4, 500.0)]
    assert [p[:2] for p in points["delay"]["a"]] == [(0.0, 900.0), (2.0, 600.0)]
    assert [p[:2] for p in points["drop"]["b"]] == [(0.0, 810.0), (0.2, 650.0)]  # its own drop=0 wins over clean
    assert points["delay"]["b"] == [(0.0, 800.0, 799.0, 801.0)]
    assert "expert" not in points["drop"]
    assert robustness_points([row("a", "none", 900.0)]) == {}


def test_none_names_the_clean_level_and_unknown_names_are_refused(two_runs):
    assert EvaluateConfig(runs=two_runs, perturb="none").perturb is None
    with pytest.raises(ConfigError, match="unknown perturbation 'nothing'.*or none"):
        EvaluateConfig(runs=two_runs, perturb="nothing")


def test_an_evaluation_in_this_process_drives_the_weights_on_disk_now(tiny_demos, tmp_path):
    # DAgger checks a run's weights after each round in the same process: a second evaluation must not drive the
    # policy loaded by the first (the policies are cached in a process, for its episodes)
    run = str(tmp_path / "run")
    train(TrainConfig(data=[tiny_demos], out=run, head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    evaluate(EvaluateConfig(runs=[run], episodes=1, seed_start=500, workers=1, max_steps=5, expert=False))
    before = [p.detach().clone() for p in ev.run_policy(run, "best", None).net.parameters()]
    train(TrainConfig(data=[tiny_demos], out=run, head="gru", window=4, epochs=2, batch_size=16, chunk=4), resume=True, quiet=True,
          restart_best=True)
    evaluate(EvaluateConfig(runs=[run], episodes=1, seed_start=500, workers=1, max_steps=5, expert=False))
    after = list(ev.run_policy(run, "best", None).net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))


def test_drive_average_drives_each_run_through_random_convolutions_when_asked(two_runs):
    """--drive-average M overrides each run's own (0 here): its policy then averages M random-convolution views."""
    plain, averaged = (evaluate(EvaluateConfig(runs=two_runs[:1], episodes=1, seed_start=500, workers=1, max_steps=40, expert=False,
                                               drive_average=m))[0] for m in (None, 2))
    assert plain["drive_average"] == 0 and averaged["drive_average"] == 2
    assert ev.run_policy(two_runs[0], "best", None, 3).average == 3 and ev.run_policy(two_runs[0], "best", None).average == 0
    with pytest.raises(ConfigError, match=r"drive-average must be a whole number in 0\.\."):
        EvaluateConfig(runs=two_runs, drive_average=-1)
