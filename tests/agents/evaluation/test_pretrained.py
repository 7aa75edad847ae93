"""The shipped policies load from their folders alone and drive; their training seeds are refused."""

import json
from pathlib import Path

import numpy as np
import pytest

from agents.carracing.env import make_env
from agents.evaluation.evaluate import EvaluateConfig, describe_run, evaluate
from agents.experts import make_expert
from agents.driving.policy import DrivingPolicy
from agents.driving.rollout import run_episode
from nac import ConfigError

PRETRAINED = Path(__file__).parents[3] / "agents" / "pretrained"
RUNS = ["nac", "lstm", "gru", "cfc", "mha", "mha-rope", "nac-mix", "nac-mix-notime"]


@pytest.mark.parametrize("run", RUNS)
def test_a_shipped_policy_rebuilds_and_acts(run):
    head = "nac" if run.startswith("nac") else run
    policy = DrivingPolicy.from_run(PRETRAINED / run)
    assert policy.net.config.head == head and policy.continuous
    assert policy.net.config.use_time == (run != "nac-mix-notime")
    action = policy.select_action(np.full((96, 96, 3), 100, np.uint8))
    assert action.shape == (3,) and -1 <= action[0] <= 1
    info = describe_run(str(PRETRAINED / run), "best")
    assert set(range(50)) <= set(info.training_seeds) and info.val_accuracy > 0.8


def test_their_training_seeds_are_refused():
    with pytest.raises(ConfigError, match="include training episodes"):
        evaluate(EvaluateConfig(runs=[str(PRETRAINED / "nac")], episodes=2, seed_start=48, workers=1, max_steps=5))


def test_the_shipped_ppo_experts_drive_without_a_model_argument_in_either_action_space():
    env = make_env(True, max_steps=40)
    expert = make_expert("ppo", env)  # agents/pretrained/ppo-expert
    result = run_episode(env, expert, seed=10_000)
    env.close()
    assert result.length == 40 and result.episode_return > 0  # it drives onto the first tiles
    env = make_env(False, max_steps=40)
    expert = make_expert("ppo", env)  # a discrete environment: agents/pretrained/ppo-expert-discrete
    assert json.loads(Path(expert.describe()["model"], "config.json").read_text())["continuous"] is False
    result = run_episode(env, expert, seed=10_000)
    env.close()
    assert result.length == 40 and result.episode_return > 0


CHECK_TRACKS, CHECK_STEPS = (10003, 10011), 250  # validation tracks, the first 250 steps: a few bends each


def drive(make_policy, seed: int, scenario: str = "clean") -> float:
    """The return over the check's steps of one track in one scene."""
    env = make_env(True, max_steps=CHECK_STEPS, scenario=scenario)
    got = run_episode(env, make_policy(env), seed=seed).episode_return
    env.close()
    return got


@pytest.fixture(scope="module")
def expert_returns() -> dict[int, float]:
    """The continuous track expert's return over the check's steps of each clean track."""
    return {seed: drive(lambda env: make_expert("track", env), seed) for seed in CHECK_TRACKS}


@pytest.mark.parametrize("run", RUNS)
def test_a_shipped_policy_still_drives_as_the_expert_does(run, expert_returns):
    """In closed loop on held-out tracks, every shipped CarRacing policy collects at least 95 % of the expert's return
    over the same steps (each drives within a few points of it): a change to what a policy sees (preprocessing,
    timestamps, the renderer) or to how its outputs become actions fails here, not in a user's evaluation."""
    policy = DrivingPolicy.from_run(PRETRAINED / run)
    for seed in CHECK_TRACKS:
        got = drive(lambda env: policy, seed)
        assert got >= 0.95 * expert_returns[seed], (seed, got, expert_returns[seed])


@pytest.mark.parametrize("scenario", ["photos", "domain-randomize"])
def test_the_shipped_nac_drives_scenes_it_never_saw(scenario):
    """Trained by full-contrast-jitter-retrain on clean frames only, the shipped NAC keeps to the road where the grass is a
    photograph or gymnasium's domain randomization recolours everything, within 10 % of the expert on the same
    tracks (domain randomization draws its own tracks; the expert reads the track, not the pixels)."""
    policy = DrivingPolicy.from_run(PRETRAINED / "nac")
    assert policy.net.config.frame_input == "rgb+contrast-scaled"
    for seed in CHECK_TRACKS:
        expert = drive(lambda env: make_expert("track", env), seed, scenario)
        got = drive(lambda env: policy, seed, scenario)
        assert got >= 0.9 * expert, (scenario, seed, got, expert)
