"""The privileged track-following expert drives whole laps in both action spaces."""

import numpy as np
import pytest

from agents.env import make_env
from agents.experts import make_expert
from agents.rollout import run_episode, summarize
from nac.layer import ConfigError


@pytest.mark.parametrize("continuous", [False, True])
def test_track_expert_finishes_laps(continuous):
    env = make_env(continuous, pixels=False)
    expert = make_expert("track", env)
    results = [run_episode(env, expert, seed) for seed in (300, 301)]
    assert all(r.lap_finished for r in results)
    assert min(r.episode_return for r in results) > 880


def test_track_expert_turns_towards_the_track():
    """Placed on a left-hand bend, the discrete expert steers left (action 2) at some point."""
    env = make_env(False, pixels=False)
    expert = make_expert("track", env)
    actions = []

    class Spy:
        def before_step(self, env, obs, action):
            actions.append(int(action))

        def after_step(self, *args):
            pass

    run_episode(env, expert, 300, observer=Spy())
    counts = np.bincount(actions, minlength=5)
    assert counts[1] > 0 and counts[2] > 0 and counts[3] > counts[1]  # both turns, mostly gas


def test_unknown_expert_and_model_for_track_are_refused():
    env = make_env(False, pixels=False)
    with pytest.raises(ConfigError, match="unknown expert 'human'; choose one of track"):
        make_expert("human", env)
    with pytest.raises(ConfigError, match="needs no model file"):
        make_expert("track", env, model="ppo.zip")


def test_summary_statistics():
    s = summarize([900.0, 910.0, 920.0, 880.0])
    assert s["mean_return"] == pytest.approx(902.5)
    assert s["std_return"] == pytest.approx(np.std([900, 910, 920, 880], ddof=1))
    assert s["ci95_low"] < 902.5 < s["ci95_high"]
    assert s["solved_share"] == 0.75
