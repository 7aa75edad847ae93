"""The privileged state of the car that the experts steer by and the recorders keep beside each frame (not what the
camera sees)."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass
class CarState:
    """What the simulator knows about the car (not what the camera sees)."""

    x: float
    y: float
    angle: float  # hull angle, radians (Box2D, counter-clockwise)
    speed: float  # |velocity|, Box2D units per second
    wheel_angle: float  # front-wheel joint angle, radians, positive = left
    tiles_visited: int
    track_tiles: int

    @property
    def progress(self) -> float:
        return self.tiles_visited / max(1, self.track_tiles)

    def as_array(self) -> np.ndarray:
        return np.array([self.x, self.y, self.angle, self.speed, self.wheel_angle, self.progress], dtype=np.float32)


STATE_FIELDS = ("x", "y", "angle", "speed", "wheel_angle", "progress", "plan_wheel_angle", "speed_excess", "policy_saw")
# plan_wheel_angle: the wheel angle (as wheel_angle) the expert plans to have PLAN_AHEAD steps later; NaN for
# experts that do not plan (only the discrete track expert does). speed_excess: the car's speed above the track
# expert's target speed there (u/s; negative below it), from which it brakes; NaN for other experts. Both recorded
# beside the car's state (collect.Recorder). policy_saw: in a DAgger rollout, 1 where the driving policy saw the
# frame when it came (0: a perturbation dropped or delayed it: agents.carracing.perturb.PerturbedPolicy.saw); NaN in expert
# demonstrations. Training cuts the windows the policy saw from it (datasets.windows.arrival_back).
PLAN_AHEAD = 3
BRAKE_EXCESS = 3.0  # the discrete track expert brakes when speed_excess is above this (its speed_margin); so does the
# wheel decoder, with the excess a wheel-angle network predicts


def car_state(env: gym.Env) -> CarState:
    u = env.unwrapped
    car = u.car
    x, y = car.hull.position
    return CarState(
        x=float(x),
        y=float(y),
        angle=float(car.hull.angle),
        speed=float(np.linalg.norm(car.hull.linearVelocity)),
        wheel_angle=float(car.wheels[0].joint.angle),
        tiles_visited=int(u.tile_visited_count),
        track_tiles=len(u.track),
    )
