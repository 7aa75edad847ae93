"""A discrete car's front wheels: their physics step by step, the speed bar read from a frame, and driving the wheels
to an angle (the decoder of wheel-angle networks)."""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from itertools import product

import numpy as np

from agents.carracing.state import BRAKE_EXCESS, PLAN_AHEAD


WHEEL_LIMIT = 0.4  # the front-wheel joint's limit, radians
WHEEL_RATE = 0.06  # the most a front wheel turns in one step: car_dynamics' joint motor, 3 rad/s at 50 FPS
DISCRETE_STEER = 0.6  # the wheel angle a discrete steer action aims at (the joint stops at WHEEL_STOP)
WHEEL_STOP = 0.42  # where the joint stops: Box2D lets it pass WHEEL_LIMIT within its angular slop (2 degrees), and a
# discrete car's wheels, turning 0.06 rad a step from straight, stop at the seventh step (measured on seed 301)


def wheel_after(angle: np.ndarray | float, action: np.ndarray | int) -> np.ndarray:
    """The front-wheel joint angle (radians, positive = left, as CarState.wheel_angle) one step
    after a discrete action: car_dynamics turns the wheel towards -0.6 (action 1, right), +0.6
    (2, left) or 0 (any other) at its motor's speed, min(50 x shortfall, 3) rad/s, up to where the
    joint stops (WHEEL_STOP). A policy can so follow its wheels from its own actions: over three
    expert episodes this model stayed within 0.001 rad of Box2D's joint, and over a lap driven to
    the joint's stops (tests/agents/experts/test_expert.py). Elementwise over arrays."""
    action = np.asarray(action)
    return _turned(angle, np.where(action == 1, -DISCRETE_STEER, np.where(action == 2, DISCRETE_STEER, 0.0)))


def _turned(angle, aim):  # noqa: ANN001, ANN202 - arrays of numpy or torch alike
    """The wheel angle one step after its motor aimed it at `aim` (wheel_after's rule, on numpy arrays or torch tensors:
    both clip by the same method)."""
    return (angle + (aim - angle).clip(-WHEEL_RATE, WHEEL_RATE)).clip(-WHEEL_STOP, WHEEL_STOP)


def _is_tensor(a: object) -> bool:
    """Whether `a` is a torch tensor: wheel_action then decodes on its device (training's accuracy, with no copy to
    the host), and this module still imports no torch."""
    return type(a).__module__.startswith("torch")


def _where(cond, a, b):  # noqa: ANN001, ANN202
    """np.where, or torch.where where the condition is a torch tensor."""
    if _is_tensor(cond):
        import torch

        return torch.where(cond, a, b)
    return np.where(cond, a, b)


SPEED_BAR = (slice(84, 96), slice(12, 14))
SPEED_PER_UNIT = 1.0 / (2 * 255 * 0.4 * 96 / 800)  # u/s per unit of the bar's summed red channel
SPEED_BAR_BASE = 3.31  # u/s: smoothscale spreads the bar's base over the row below it (measured: the median offset over
# 8514 frames of ten discrete-expert demonstrations). The bar's drawn height comes in steps of 2.45 u/s (smoothscale's
# fixed-point weights), so the reading is within 1.6 u/s of the car's speed, standstill included


def frame_speed(frame: np.ndarray) -> float:
    """The car's speed (u/s) as the frame's speed bar shows it, within 1.6 u/s (tests/agents/carracing/test_env.py):
    what a policy knows of its speed without privileged state. frame: a (96, 96, 3) CarRacing frame.
    Read here by hand: the bar is four lines of gymnasium's drawing code, and no library reads it."""
    if frame.shape != (96, 96, 3):
        raise ValueError(f"frame_speed reads CarRacing's 96 x 96 x 3 frames (got shape {frame.shape})")
    bar = float(frame[SPEED_BAR[0], SPEED_BAR[1], 0].sum(dtype=np.int64))
    return max(0.0, SPEED_PER_UNIT * bar - SPEED_BAR_BASE)


WHEEL_CHOICES = np.array([3, 1, 2])  # gas first: on a tie the engine stays on
STEER_FIRST = 0.08  # rad: wheel_action steers instead of braking while its wheels are further than this from the target


@lru_cache(maxsize=None)
def steer_sequences(steps: int) -> np.ndarray:
    """Every sequence of `steps` steering choices (WHEEL_CHOICES: gas, right, left), (3 ** steps, steps), in the
    order that puts gas first: wheel_steer's ties go to the engine, as wheel_action's do."""
    return np.array(list(product(WHEEL_CHOICES, repeat=steps)), dtype=np.int64).reshape(-1, steps)


def wheel_steer(aims: list[float], wheel: float) -> int:
    """Gas (3), right (1) or left (2): the first action of the sequence of len(aims) of them whose wheels
    (wheel_after, from `wheel`) come nearest aims[k] after its step k + 1, squared errors summed. One aim: the
    action that brings the wheels nearest it after this step (wheel_action's choice). More: a sequence looks past
    an aim that drops for a step and comes back (the planning expert's aims do, between its pulses), where the
    one-step choice unwinds the wheels and steers again (docs/studies/discrete-wheel-decoder/)."""
    seqs = steer_sequences(len(aims))
    w, cost = np.full(len(seqs), float(wheel)), np.zeros(len(seqs))
    for k, aim in enumerate(aims):
        w = wheel_after(w, seqs[:, k])
        cost += (w - aim) ** 2
    return int(seqs[int(np.argmin(cost)), 0])


def wheel_action(target: np.ndarray | float, excess: np.ndarray | float, wheel: np.ndarray | float,
                 steer: int | None = None) -> np.ndarray:
    """The discrete action that drives like a wheel-angle target, by the discrete track expert's
    speed rules on a speed excess (u/s above its target speed): brake (4) where the excess is above
    BRAKE_EXCESS and the wheels are within STEER_FIRST of the target; else whichever of gas (3, the
    wheel unwinds), right (1) and left (2) brings the wheel from `wheel` nearest `target` (radians,
    as wheel_angle; or `steer`, that choice made by wheel_steer over several steps), with no action
    (0, the wheel unwinds as under gas) instead of gas where the excess is above 0 (the expert's coast
    band, TrackExpertConfig.coast). Fed the discrete track expert's own planned angle PLAN_AHEAD steps
    ahead and its excess, this drives the expert's path on most tracks (not through every hairpin:
    docs/studies/discrete-wheel-decoder/) while agreeing with its actions on only 76-81 % of the
    steps (docs/training.md): many pulse patterns give the same path, which is why a network learns
    the angle better than the pulses.
    Steering first: a discrete car cannot steer and brake in one step, and braking unwinds its
    wheels; the expert brakes on the straight before a bend, but a policy that brakes late, in the
    bend, straightened its wheels and left the road (docs/studies/discrete-heads/README.md, 'Steering before braking').
    Elementwise, over numpy arrays or torch tensors (decoded on their device, in float64 either way)."""
    target, wheel, excess = (a.double() if _is_tensor(a) else np.asarray(a, dtype=np.float64) for a in (target, wheel, excess))
    if steer is None:  # the choice whose wheels come nearest the target, ties to the first of gas, right, left (WHEEL_CHOICES)
        gas, right, left = (abs(_turned(wheel, aim) - target) for aim in (0.0, -DISCRETE_STEER, DISCRETE_STEER))
        steer = _where((gas <= right) & (gas <= left), 3, _where(right <= left, 1, 2))
    brake = (excess > BRAKE_EXCESS) & (abs(target - wheel) <= STEER_FIRST)
    return _where(brake, 4, _where((steer == 3) & (excess > 0), 0, steer))


WHEEL_DELAY = PLAN_AHEAD  # steps: WheelDecoder steers towards the angle the network asked for this many steps before


class WheelDecoder:
    """Drives a discrete car, step by step, from a wheel-angle network's outputs: the angle its
    planning expert's wheels reach PLAN_AHEAD steps later, and the speed excess (wheel_action).

    It follows its front wheels from its own actions (wheel_after, from straight at reset) and
    steers towards the angle asked for `delay` steps before, which is the one planned for now:
    wheel_action turns the wheels towards an angle at once, so aimed at the latest output they led
    the expert's by up to three steps, and a network that turned in early cut the inside of a bend
    over the grass and skipped its tile. The delay is the one that finished most laps on tuning tracks
    (docs/studies/discrete-heads/README.md, 'The wheel decoder's delay'). The first `delay` steps of an episode aim
    at its first output.

    With `horizon` h > 1 it steers by wheel_steer on the angles asked for this step and the h - 1 after it (the
    outputs of `delay` steps before and later ones: h <= delay + 1)."""

    def __init__(self, delay: int = WHEEL_DELAY, horizon: int = 1) -> None:
        if delay < 0:
            raise ValueError(f"WheelDecoder: delay must be >= 0 (got {delay})")
        if not 1 <= horizon <= delay + 1:
            raise ValueError(f"WheelDecoder: horizon must be in [1, delay + 1 = {delay + 1}] (got {horizon})")
        self.delay, self.horizon = delay, horizon
        self.reset()

    def reset(self) -> None:
        self.wheel = 0.0  # the front wheels' angle as this decoder's actions have turned them
        self._asked: deque[float] = deque(maxlen=self.delay + 1)

    @property
    def aim(self) -> float:
        """The angle steered towards at the last step (0 before the first)."""
        return self._asked[0] if self._asked else 0.0

    def __call__(self, target: float, excess: float) -> int:
        """The action for this step's outputs: target (radians, positive = left) and excess (u/s)."""
        self._asked.append(float(target))
        steer = None
        if self.horizon > 1:  # the angles due at this step and the next ones, the first output standing in for those before it
            due = [self._asked[0]] * (self.delay + 1 - len(self._asked)) + list(self._asked)
            steer = wheel_steer(due[: self.horizon], self.wheel)
        action = int(wheel_action(self.aim, excess, self.wheel, steer))
        self.wheel = float(wheel_after(self.wheel, action))
        return action
