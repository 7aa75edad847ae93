"""`nacdrive expert eval` (agents.evaluation.expert_eval): an expert's returns over fixed seeds, the same at every call."""

import pytest

from agents.evaluation.expert_eval import ExpertEvalConfig, evaluate_expert
from nac.config import ConfigError


def test_the_track_expert_is_evaluated_on_the_seeds_asked_and_twice_the_same():
    cfg = ExpertEvalConfig(episodes=2, seed_start=7, max_steps=120, workers=1)
    first, again = evaluate_expert(cfg), evaluate_expert(cfg)
    assert first["seeds"] == [7, 8] and first["returns"] == again["returns"] and first["episodes"] == 2
    assert all(e["episode_return"] > 0 and e["length"] == 120 for e in first["episodes_detail"])  # 120 steps on the road: tiles gained
    with pytest.raises(ConfigError, match=r"max-steps must be a whole number in 1\.\."):
        ExpertEvalConfig(max_steps=0)
