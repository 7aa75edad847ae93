"""A Udacity study's runs: PilotNet heads trained on a stand-in recording and driven through bridges of their own, an
episode whose bridge dies driven again."""

import dataclasses

import pytest
import websocket

from nac import ConfigError
from datasets.udacity import recorded_seeds


def test_a_udacity_study_trains_pilotnet_heads_and_drives_them_through_the_bridge(tmp_path):
    """study --task udacity: one stand-in recording, PilotNet runs (its own dense layers and a
    registry head), every held-out episode driven by the stand-in through a bridge process."""
    from agents.studies.grid import StudyConfig
    from agents.studies.study import run_study
    from agents.studies.report import build
    from sim_bridge.udacity_runs import UDACITY

    cfg = StudyConfig(out=str(tmp_path / "s"), task="udacity", heads=["dense", "gru"], seeds=1, demos=2, episodes=2,
                      seed_start=100, max_steps=40, workers=2, speed=20.0, turn_slowdown=0.8,
                      variants={"base": {"epochs": 1, "batch_size": 16, "net": {"d_model": 16}}})
    data = run_study(cfg, quiet=True, kind=UDACITY)
    assert sorted(data["runs"]) == ["base/dense/seed0", "base/gru/seed0"]
    assert all(r["done"] and r["val_loss"] is not None for r in data["runs"].values())
    assert recorded_seeds([str(tmp_path / "s/demos")]) == [0, 1]
    eps = [e for e in data["episodes"] if e["run"] != "expert"]
    assert sorted((e["run"], e["episode_seed"]) for e in eps) == [(r, s) for r in sorted(data["runs"]) for s in (100, 101)]
    assert all(e["length"] == 40 and e["step_ms_p50"] > 0 for e in eps)  # driven through a bridge, every step answered
    again = run_study(cfg, quiet=True, kind=UDACITY)
    assert again["episodes"] == data["episodes"]
    assert UDACITY.episode_job(cfg, "RUN", "none", (100,)) == [("RUN", 20.0, 40, 100, 0.8)]  # each episode's bridge gets the study's controller
    with pytest.raises(ConfigError, match="was made with turn_slowdown=0.8, not 0.5"):
        run_study(dataclasses.replace(cfg, turn_slowdown=0.5), quiet=True, kind=UDACITY)
    build(tmp_path / "s", reps=100)
    text = (tmp_path / "s/report/report.md").read_text()
    assert "validation MSE" in text and "| dense | 1 x 2 |" in text
    assert "- base: epochs=1, lr=" in text and "dagger" not in text  # the recipe as PilotNet runs have it: no DAgger fields
    with pytest.raises(ConfigError, match="no --perturb"):
        StudyConfig(out="x", task="udacity", levels=["none", "drop=0.2"])
    with pytest.raises(ConfigError, match=r"turn-slowdown must be a number in \[0, 1\) \(got 1.0\)"):
        StudyConfig(out="x", task="udacity", turn_slowdown=1.0)
    with pytest.raises(ConfigError, match="dagger_rounds not a recipe field of PilotNet runs"):
        StudyConfig(out="x", task="udacity", variants={"b": {"dagger_rounds": 0}})
    with pytest.raises(ConfigError, match="needs its StudyKind"):
        run_study(StudyConfig(out=str(tmp_path / "t"), task="udacity"))


def test_a_udacity_episode_whose_bridge_dies_is_driven_again(tmp_path):
    from sim_bridge.udacity_runs import EPISODE_ATTEMPTS, driven_again

    calls = []

    def flaky(job):
        calls.append(job)
        if len(calls) == 1:
            raise websocket.WebSocketConnectionClosedException("Connection to remote host was lost.")
        return {"return": 1.0}

    assert driven_again(flaky, ("run", None, 10, 5, 0.0)) == {"return": 1.0} and len(calls) == 2
    calls.clear()

    def dies(job):
        calls.append(job)
        raise RuntimeError("the bridge exited (1)")

    with pytest.raises(RuntimeError, match=f"seed 5: the bridge failed {EPISODE_ATTEMPTS} times"):
        driven_again(dies, ("run", None, 10, 5, 0.0))
    assert len(calls) == EPISODE_ATTEMPTS
