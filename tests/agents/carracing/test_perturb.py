"""Perturbations: each changes what the policy sees as specified, reproducibly under the seed,
and leaves the environment's reward alone; timed heads get the true time of each frame."""

import numpy as np
import pytest
import torch

from agents.carracing.env import FPS, make_env
from agents.carracing.perturb import PerturbedPolicy, parse
from agents.driving.policy import DrivingPolicy
from agents.driving.rollout import run_episode
from nac import ConfigError
from nac.driving import DrivingNet, DrivingNetConfig


class Recorder:
    """A policy that records what it saw and answers with the frame's index."""

    def __init__(self):
        self.seen = []

    def reset(self):
        self.seen = []

    def select_action(self, frame, timestamp=None):
        self.seen.append((int(frame[0, 0, 0]), timestamp))
        return int(frame[0, 0, 0]) % 5


def _frames(n):
    out = []
    for i in range(n):
        f = np.full((96, 96, 3), 100, np.uint8)
        f[0, 0, 0] = i
        out.append(f)
    return out


def _drive(spec, seed=0, n=60):
    inner = Recorder()
    p = PerturbedPolicy(inner, parse(spec), continuous=False)
    p.reset(seed)
    actions = [p.select_action(f) for f in _frames(n)]
    return inner.seen, actions


def test_parse_says_what_is_allowed():
    assert str(parse("drop=0.2")) == "drop=0.2" and parse("blur").level == 1.0
    for bad, msg in [("teleport=1", "unknown perturbation"), ("drop", "needs a level"), ("drop=1.5", "out of range"),
                     ("delay=1.5", "out of range"), ("hold=0", "out of range"), ("noise=x", "not a number")]:
        with pytest.raises(ConfigError, match=msg):
            parse(bad)


def test_drop_loses_frames_and_keeps_true_times():
    seen, actions = _drive("drop=0.5")
    idx = [i for i, _ in seen]
    assert idx[0] == 0 and 15 < len(seen) < 45
    assert all(t == pytest.approx(i / FPS) for i, t in seen)  # the true time of each frame seen
    for step, a in enumerate(actions):  # a lost frame repeats the last action
        last_seen = max(i for i in idx if i <= step)
        assert a == last_seen % 5


def test_jitter_delivers_frames_at_irregular_times():
    seen, _ = _drive("jitter=3")
    gaps = np.diff([i for i, _ in seen])
    assert set(gaps) <= {1, 2, 3} and len(set(gaps)) > 1
    assert all(t == pytest.approx(i / FPS) for i, t in seen)


def test_hold_shows_every_frame_and_executes_each_decision_for_1_to_s_steps():
    class Index(Recorder):
        def select_action(self, frame, timestamp=None):
            super().select_action(frame, timestamp)
            return int(frame[0, 0, 0])  # the frame's index: which decision the car executes

    inner = Index()
    p = PerturbedPolicy(inner, parse("hold=3"), continuous=False)
    p.reset(0)
    executed = [p.select_action(f) for f in _frames(60)]
    assert [i for i, _ in inner.seen] == list(range(60))  # every frame, on time
    assert all(t == pytest.approx(i / FPS) for i, t in inner.seen)
    decided = sorted(set(executed))  # the steps whose decision the car executed, each from its own step on
    assert decided[0] == 0 and all(executed[d] == d for d in decided)
    assert set(np.diff(decided)) <= {1, 2, 3} and len(set(np.diff(decided))) > 1
    assert executed == [max(d for d in decided if d <= s) for s in range(60)]  # held until the next decision


def test_delay_shows_frames_k_steps_late():
    seen, actions = _drive("delay=2", n=10)
    assert actions[:2] == [0, 0]  # nothing has arrived yet: no-op
    assert [i for i, _ in seen] == list(range(8)) and seen[3][1] == pytest.approx(3 / FPS)


@pytest.mark.parametrize("spec", ["noise=0.05", "blur", "brightness=0.6", "hue=0.2"])
def test_sensor_perturbations_change_the_pixels(spec):
    inner = []

    class Keep(Recorder):
        def select_action(self, frame, timestamp=None):
            inner.append(frame)
            return 0

    frame = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    p = PerturbedPolicy(Keep(), parse(spec), continuous=False)
    p.reset(0)
    p.select_action(frame)
    assert inner[0].shape == frame.shape and inner[0].dtype == np.uint8 and not np.array_equal(inner[0], frame)


def test_the_same_seed_gives_the_same_perturbation():
    assert _drive("drop=0.3", seed=4) == _drive("drop=0.3", seed=4)
    assert _drive("drop=0.3", seed=4) != _drive("drop=0.3", seed=5)
    _, a = _drive("action-noise=1.0")
    _, b = _drive("action-noise=0.0")
    assert a != b and b == [i % 5 for i in range(60)]


def test_the_environments_reward_is_untouched():
    class Fixed:
        def reset(self):
            pass

        def select_action(self, frame, timestamp=None):
            return 3  # gas, whatever the camera shows

    returns = []
    for spec in (None, "noise=0.2", "drop=0.5", "blur"):
        env = make_env(False, max_steps=40)
        policy = Fixed() if spec is None else PerturbedPolicy(Fixed(), parse(spec), continuous=False)
        if spec is not None:
            policy.reset(7)
            policy.reset = lambda: None  # run_episode's reset must keep the seeded draws
        returns.append(run_episode(env, policy, seed=7).episode_return)
        env.close()
    assert returns[1] == returns[0] == returns[2] == returns[3]  # the same actions: the same reward


def test_a_timed_head_gets_the_true_times_under_drop():
    torch.manual_seed(0)
    policy = DrivingPolicy(DrivingNet(DrivingNetConfig(head="nac", window=4)))
    p = PerturbedPolicy(policy, parse("drop=0.5"), continuous=False)
    p.reset(3)
    for f in _frames(30):
        p.select_action(f)
    _, times = policy.window()
    assert np.allclose(times[0].numpy(), p.seen_times[-4:], atol=1e-6)
    assert len(p.seen_times) < 30  # frames were lost, and the head saw only the true times of the others
