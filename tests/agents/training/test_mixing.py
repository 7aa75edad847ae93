"""Who drives a DAgger rollout (agents.training.mixing): beta's mix, the takeover gate, a perturbed policy, a batch whose
rollout has ended."""

import numpy as np
import pytest

from agents.training.dagger_config import DaggerConfig
from agents.training.mixing import MixedDriver
from agents.training import dagger as dagger_module
from nac import ConfigError


class _Fixed:
    def __init__(self, action):
        self.action, self.seen = action, 0

    def reset(self):
        self.seen = 0

    def select_action(self, obs):
        self.seen += 1
        return self.action


class _Speeding(_Fixed):
    """An expert whose car is `excess` u/s over its target speed, as the track expert reports it."""

    def __init__(self, action, excess):
        super().__init__(action)
        self.excess = list(excess)
        self.speed_excess = float("nan")

    def select_action(self, obs):
        self.speed_excess = self.excess[self.seen]
        return super().select_action(obs)


def _car(speed):
    """A stand-in environment whose car moves at `speed` (all the gate reads of it besides the wheels)."""
    from types import SimpleNamespace

    car = SimpleNamespace(hull=SimpleNamespace(linearVelocity=(0.0, speed)))
    return SimpleNamespace(unwrapped=SimpleNamespace(car=car))


class _Counting:
    """A policy that takes timestamps, as DrivingPolicy does, and counts the frames it was given."""

    def __init__(self):
        self.times = []

    def reset(self):
        self.times = []

    def select_action(self, frame, timestamp=None):
        self.times.append(timestamp)
        return 1


def test_beta_mixing_executes_the_expert_that_often_and_both_see_every_frame():
    policy, expert = _Fixed(1), _Fixed(3)
    mix = MixedDriver(policy, expert, beta=0.25, seed=0)
    executed = [mix.select_action(None) for _ in range(2000)]
    assert mix.label == 3 and policy.seen == expert.seen == 2000
    assert np.mean(np.array(executed) == 3) == pytest.approx(0.25, abs=0.03)


def test_the_takeover_gate_lets_the_expert_drive_while_the_car_is_too_fast_off_the_road_or_stalled_and_a_hold_after(monkeypatch):
    from agents.training import mixing

    off_road = {"wheels": 0}
    monkeypatch.setattr(mixing, "wheels_off_road", lambda env: off_road["wheels"])
    hold, after = mixing.TAKEOVER_HOLD, mixing.STALL_AFTER
    # too fast on steps 5..6, a wheel off the road on step 30, stalled from step 90: the expert drives then and `hold` steps after each
    excess = [0.0] * 5 + [20.0, 20.0] + [0.0] * 93
    policy, expert, env = _Fixed(1), _Speeding(3, excess), _car(30.0)
    mix = MixedDriver(policy, expert, beta=0.0, seed=0, takeover=15.0, env=env)
    executed = []
    for t in range(len(excess)):
        off_road["wheels"] = 1 if t == 30 else 0
        env.unwrapped.car.hull.linearVelocity = (0.0, 30.0 if t < 90 else 1.0)
        executed.append(mix.select_action(None))
    by_expert = [t for t, a in enumerate(executed) if a == 3]
    assert by_expert == [*range(5, 7 + hold), *range(30, 31 + hold), *range(90, 100)]
    assert mix.expert_steps == len(by_expert) and policy.seen == expert.seen == len(excess)
    mix.reset()
    assert mix.expert_steps == 0
    # the car starts from rest: no stall in the first STALL_AFTER steps
    still = MixedDriver(_Fixed(1), _Speeding(3, [0.0] * (after + 1)), beta=0.0, seed=0, takeover=15.0, env=_car(0.0))
    assert [still.select_action(None) for _ in range(after + 1)] == [1] * after + [3]
    # without the gate the same drive is the policy's alone; an expert without a target speed (NaN) gates on the wheels and stalls only
    plain = MixedDriver(_Fixed(1), _Speeding(3, excess), beta=0.0, seed=0)
    assert all(plain.select_action(None) == 1 for _ in excess)
    blind = MixedDriver(_Fixed(1), _Speeding(3, [float("nan")] * 10), beta=0.0, seed=0, takeover=15.0, env=_car(30.0))
    off_road["wheels"] = 0
    assert all(blind.select_action(None) == 1 for _ in range(10))
    with pytest.raises(ConfigError, match=r"takeover must be a number in \[0, "):
        DaggerConfig(run="x", takeover=-1)


def test_a_perturbed_rollout_policy_sees_fewer_frames_the_same_ones_each_episode_while_the_expert_labels_all():
    from agents.carracing.perturb import PerturbedPolicy, parse

    policy = _Counting()
    mix = MixedDriver(PerturbedPolicy(policy, parse("jitter=3"), continuous=False, seed=7), _Fixed(3), beta=0.0, seed=0)
    seen = []
    for _ in range(2):
        mix.reset()  # as run_episode resets its driver: without a seed, so the wrapper keeps the rollout's
        executed = [mix.select_action(np.zeros((4, 4, 3), np.uint8)) for _ in range(300)]
        seen.append(list(policy.times))
        assert mix.label == 3 and mix.expert.seen == 300 and set(executed) == {1}
    assert seen[0] == seen[1] and 100 < len(seen[0]) < 200  # frames 1..3 steps apart: about half of them, on the same steps
    assert seen[0][:1] == [0.0] and all(0 < b - a <= 3 / 50 + 1e-9 for a, b in zip(seen[0], seen[0][1:]))
    other = MixedDriver(PerturbedPolicy(_Counting(), parse("jitter=3"), continuous=False, seed=8), _Fixed(3), beta=0.0, seed=0)
    other.reset()
    for _ in range(300):
        other.select_action(np.zeros((4, 4, 3), np.uint8))
    assert other.policy.policy.times != seen[0]  # another rollout seed, other arrivals


def test_a_rollout_that_has_ended_in_a_batch_labels_and_draws_no_more():
    class _Batch:
        def reset_batch(self, seeds):
            pass

        def select_actions(self, frames):
            return [1] * len(frames)

    class _Quiet:
        def before_step(self, *a):
            pass

        def after_step(self, *a):
            pass

    experts = [_Fixed(3), _Fixed(3)]
    batch = dagger_module.BatchMixedDriver(_Batch(), [MixedDriver(None, e, beta=0.999, seed=i) for i, e in enumerate(experts)])
    batch.reset_batch([0, 1])
    observers = batch.observers([_Quiet(), _Quiet()])
    assert batch.select_actions(np.zeros((2, 1))) == [3, 3]
    observers[0].after_step(None, 0.0, True, False, {})  # episode 0 ends; episode 1 goes on
    observers[1].after_step(None, 0.0, False, False, {})
    assert batch.select_actions(np.zeros((2, 1)))[1] == 3
    assert (experts[0].seen, experts[1].seen) == (1, 2) and [m.expert_steps for m in batch.mixes] == [1, 2]
