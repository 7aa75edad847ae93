"""The privileged track-following expert: pure pursuit on the track centreline.

It reads the simulator's own state (track centreline, car pose, velocity, front-wheel angle),
not the camera, and needs no training. Steering: pure pursuit towards a point `lookahead`
ahead on the centreline. Speed: a target from the curvature ahead (v = sqrt(a_lat / kappa)),
relaxed by the braking distance to each curve.

Discrete actions (CarRacing-v3: 1 right, 2 left, 3 gas 0.2, 4 brake 0.8) cannot hold a wheel
angle: a steer action turns the front wheels 0.06 rad per step towards +-0.6 and any other
action turns them back. The expert therefore pulses: it steers only to move the wheels away
from straight towards the pure-pursuit angle, and lets gas (which also keeps the engine on)
unwind them. Continuous actions: the car is rear-wheel drive, so throttle is cut in
proportion to steering (full throttle while steering spins it out).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.env import car_state
from nac.layer import ConfigError

WHEELBASE = 3.24  # front to rear axle, Box2D units ((80 + 82) * car_dynamics.SIZE)
MAX_WHEEL_ANGLE = 0.4  # the front-wheel joint's limit, radians


@dataclass
class TrackExpertConfig:
    continuous: bool = False  # action space: discrete (5 actions) or continuous (steer, gas, brake)
    lookahead: float = 7.0  # pure-pursuit look-ahead at standstill (Box2D units)
    lookahead_per_speed: float = 0.25  # extra look-ahead per unit of speed
    lateral_accel: float = 250.0  # speed target in curves: v = sqrt(lateral_accel / curvature)
    braking_decel: float = 60.0  # assumed deceleration when planning for a curve ahead
    min_speed: float = 20.0  # never plan slower than this
    speed_margin: float = 3.0  # discrete: brake when faster than target + margin
    steer_tolerance: float = 0.02  # discrete: wheel-angle error (rad) that triggers a steer pulse
    gas_gain: float = 0.05  # continuous: throttle per unit of speed below target
    brake_gain: float = 0.03  # continuous: brake per unit of speed above target
    throttle_cut_in_turns: float = 0.8  # continuous: throttle *= 1 - cut * |steer|

    def __post_init__(self) -> None:
        for name in ("lookahead", "lateral_accel", "braking_decel", "min_speed"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"track expert: {name} must be > 0 (got {getattr(self, name)})")
        if not 0 <= self.throttle_cut_in_turns <= 1:
            raise ConfigError("track expert: throttle_cut_in_turns must be in [0, 1]")

    @classmethod
    def for_action_space(cls, continuous: bool) -> "TrackExpertConfig":
        """Defaults tuned per action space on seeds 200..219 (not the evaluation seeds)."""
        if continuous:
            return cls(continuous=True, lookahead=6.0, lateral_accel=180.0, braking_decel=90.0)
        return cls(continuous=False)


class TrackFollowingExpert:
    """Policy contract: reset() at an episode's start, select_action(obs) in the loop.

    It drives the environment it is bound to (its privileged state); obs is ignored.
    """

    name = "track"

    def __init__(self, env: gym.Env, config: TrackExpertConfig | None = None) -> None:
        self.env = env
        self.config = config or TrackExpertConfig.for_action_space(bool(env.unwrapped.continuous))
        if bool(env.unwrapped.continuous) != self.config.continuous:
            space = "continuous" if env.unwrapped.continuous else "discrete"
            raise ConfigError(f"track expert configured for the other action space than this {space} environment")
        self._idx = 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "config": asdict(self.config)}

    def reset(self) -> None:
        track = self.env.unwrapped.track
        self._pts = np.array([(t[2], t[3]) for t in track], dtype=np.float64)  # (N, 2) centreline
        seg = np.roll(self._pts, -1, axis=0) - self._pts
        self._seg_len = np.linalg.norm(seg, axis=1)  # (N,) length of segment i -> i+1
        self._heading = np.arctan2(seg[:, 1], seg[:, 0])
        self._idx = 0

    def _nearest(self, pos: np.ndarray) -> int:
        n = len(self._pts)
        cand = (self._idx + np.arange(-5, 30)) % n  # search near the last match: never jump laps
        self._idx = int(cand[np.argmin(np.linalg.norm(self._pts[cand] - pos, axis=1))])
        return self._idx

    def _point_ahead(self, i: int, distance: float) -> np.ndarray:
        n, d = len(self._pts), 0.0
        while d < distance:
            d += self._seg_len[i]
            i = (i + 1) % n
        return self._pts[i]

    def target_speed(self, i: int, speed: float) -> float:
        """Slowest speed that the curves within the braking horizon allow from here."""
        cfg, n = self.config, len(self._pts)
        horizon = 10.0 + 0.9 * speed
        best, d, j = np.inf, 0.0, i
        while d < horizon:
            j = (j + 1) % n
            d += self._seg_len[j]
            turn = abs((self._heading[j] - self._heading[(j - 3) % n] + np.pi) % (2 * np.pi) - np.pi)
            span = self._seg_len[[(j - 2) % n, (j - 1) % n, j]].sum()
            v_curve = np.sqrt(cfg.lateral_accel / max(turn / max(span, 1e-3), 1e-4))
            best = min(best, np.sqrt(v_curve**2 + 2 * cfg.braking_decel * max(d - 5.0, 0.0)))
        return float(max(best, cfg.min_speed))

    def select_action(self, obs: Any = None) -> int | np.ndarray:
        cfg = self.config
        s = car_state(self.env)
        pos = np.array([s.x, s.y])
        hull = self.env.unwrapped.car.hull
        fwd, right = np.array(hull.GetWorldVector((0, 1))), np.array(hull.GetWorldVector((1, 0)))
        i = self._nearest(pos)
        to_target = self._point_ahead(i, cfg.lookahead + cfg.lookahead_per_speed * s.speed) - pos
        x_right, y_fwd = float(to_target @ right), float(to_target @ fwd)
        alpha = np.arctan2(x_right, y_fwd)
        # Pure pursuit: wheel angle (positive = right) that puts the target on the car's arc.
        delta = float(np.arctan2(2 * WHEELBASE * np.sin(alpha), max(np.hypot(x_right, y_fwd), 1e-3)))
        v_target = self.target_speed(i, s.speed)
        if cfg.continuous:
            steer = float(np.clip(delta / MAX_WHEEL_ANGLE, -1.0, 1.0))
            err = v_target - s.speed
            gas = float(np.clip(cfg.gas_gain * err, 0.0, 1.0)) * (1.0 - cfg.throttle_cut_in_turns * abs(steer))
            brake = float(np.clip(-cfg.brake_gain * err, 0.0, 0.8))
            return np.array([steer, gas, brake], dtype=np.float32)
        if s.speed > v_target + cfg.speed_margin:
            return 4
        err = delta - (-s.wheel_angle)  # wheel angle, right-positive like delta
        if err > cfg.steer_tolerance and delta > 0:
            return 1
        if err < -cfg.steer_tolerance and delta < 0:
            return 2
        return 3  # gas: engine on, wheels unwind towards straight
