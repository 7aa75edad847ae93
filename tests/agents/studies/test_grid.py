"""A study's grid: what it refuses before anything is trained."""

from __future__ import annotations

import pytest

from nac.config import ConfigError
from tests.agents.studies.test_study import tiny


def test_study_config_refuses(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="unknown heads"):
        tiny(tmp_path, heads=["nac", "transformer"])
    with pytest.raises(ConfigError, match="may not be demonstration seeds"):
        tiny(tmp_path, seed_start=2)
    with pytest.raises(ConfigError, match="unknown scenario or perturbation"):
        tiny(tmp_path, levels=["none", "fog=1"])
    with pytest.raises(ConfigError, match="unknown expert 'planner'; choose one of track, ppo"):
        tiny(tmp_path, expert="planner")
    tiny(tmp_path, expert="ppo", continuous=False)  # a discrete study takes the shipped discrete PPO expert
    from agents.experts import ppo_expert

    monkeypatch.setitem(ppo_expert.SHIPPED_PPO, False, tmp_path / "none")
    with pytest.raises(ConfigError, match="no discrete PPO expert is shipped"):  # and without one, says so before anything runs
        tiny(tmp_path, expert="ppo", continuous=False)
    monkeypatch.undo()
    # each variant's network, for each head and the study's action space, before anything is trained
    with pytest.raises(ConfigError, match="variant 'r' with head gru: rate_window is for discrete actions"):
        tiny(tmp_path, heads=["gru"], variants={"r": {"net": {"rate_window": 4}}})
    with pytest.raises(ConfigError, match="variant 'e' with head nac: mode must be one of"):
        tiny(tmp_path, heads=["gru", "nac"], variants={"e": {"net": {"nac": {"mode": "fast"}}}})
    tiny(tmp_path, heads=["gru"], continuous=False, variants={"r": {"net": {"rate_window": 4}}})
