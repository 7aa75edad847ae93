"""Who drives a DAgger rollout step by step: the expert with probability beta, else the policy, and the expert as well
while the car is too fast, off the road or stalled (a takeover); both see every frame."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.carracing.measures import wheels_off_road
from agents.driving.policy import DrivingPolicy
from nac.config import need


TAKEOVER_HOLD = 10  # steps the expert keeps driving after its takeover's cause has cleared (0.2 s)
# a policy that has braked to a stop sees still frames and keeps still (BC's inertia problem), so standing still is a
# cause of takeover too
STALL_SPEED, STALL_AFTER = 5.0, 50  # u/s, steps (the car starts from rest)


class MixedDriver:
    """Executes the expert's action with probability beta, else the policy's; both see every
    frame. With `takeover` > 0 the expert also drives while the car on `env` is more than
    `takeover` u/s over its target speed, has a wheel off the road or has stalled, and
    TAKEOVER_HOLD steps after. `label` is the expert's action on the latest frame; `expert_steps` counts the steps
    the expert's action was executed since reset."""

    def __init__(self, policy: DrivingPolicy, expert: Any, beta: float, seed: int, takeover: float = 0.0, env: Any = None) -> None:
        need(not takeover or env is not None, "a takeover gate needs the environment")
        self.policy, self.expert, self.beta, self.takeover, self.env = policy, expert, beta, takeover, env
        self.rng = np.random.default_rng(seed)
        self.label: Any = None
        self.expert_steps = self._hold = self._t = 0

    def reset(self) -> None:
        self.policy.reset()
        self.reset_mix()

    def reset_mix(self) -> None:
        self.expert.reset()
        self.expert_steps = self._hold = self._t = 0

    def _gate(self) -> bool:
        """Whether the expert takes over on this step (called after the expert chose its label)."""
        if not self.takeover:
            return False
        excess = getattr(self.expert, "speed_excess", math.nan)  # NaN (no gate on speed) for an expert without a target speed
        self._t += 1
        stalled = self._t > STALL_AFTER and math.hypot(*self.env.unwrapped.car.hull.linearVelocity) < STALL_SPEED
        if wheels_off_road(self.env) > 0 or excess > self.takeover or stalled:
            self._hold = TAKEOVER_HOLD
            return True
        if self._hold:
            self._hold -= 1
            return True
        return False

    def select_action(self, obs: Any) -> Any:
        return self.choose(obs, self.policy.select_action(obs))

    def choose(self, obs: Any, action: Any) -> Any:
        """The action executed on this frame: the expert's label or the policy's `action`."""
        self.label = self.expert.select_action(obs)
        gated = self._gate()
        if gated or self.rng.random() < self.beta:
            self.expert_steps += 1
            return self.label
        return action


class BatchMixedDriver:
    """Several rollouts' MixedDrivers stepped together: one batched forward of their shared policy a step
    (agents.driving.rollout.run_episodes), each rollout's expert, gate and draws its own. `observers` wraps each
    rollout's observer so that a rollout that has ended draws and labels no more while the others go on."""

    def __init__(self, policy: DrivingPolicy, mixes: list[MixedDriver]) -> None:
        self.policy, self.mixes = policy, mixes
        self.ended = [False] * len(mixes)

    def reset_batch(self, seeds: list[int]) -> None:
        self.policy.reset_batch(seeds)
        for mix in self.mixes:
            mix.reset_mix()
        self.ended = [False] * len(self.mixes)

    def select_actions(self, frames: np.ndarray) -> list[Any]:
        actions = self.policy.select_actions(frames)
        return [a if ended else mix.choose(f, a) for mix, f, a, ended in zip(self.mixes, frames, actions, self.ended)]

    def observers(self, inner: list[Any]) -> list[Any]:
        return [_EndsMix(self, i, obs) for i, obs in enumerate(inner)]


class _EndsMix:
    def __init__(self, batch: BatchMixedDriver, i: int, inner: Any) -> None:
        self.batch, self.i, self.inner = batch, i, inner

    def before_step(self, env: Any, obs: Any, action: Any) -> None:
        self.inner.before_step(env, obs, action)

    def after_step(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        self.inner.after_step(obs, reward, terminated, truncated, info)
        self.batch.ended[self.i] = terminated or truncated
