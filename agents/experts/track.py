"""The privileged track-following expert: pure pursuit on the track, no training.

It reads the simulator's own state (track centreline, car pose, velocity, front-wheel angle),
not the camera. Steering: pure pursuit towards a point `lookahead` ahead on its line, which is
the centreline or, with `line_room` > 0, a racing line that cuts the curves within the road
(see racing_line). Speed: a target from the curvature ahead (v = sqrt(a_lat / kappa)), relaxed
by the braking distance to each curve.

Discrete actions (CarRacing-v3: 1 right, 2 left, 3 gas 0.2, 4 brake 0.8) cannot hold a wheel
angle: a steer action turns the front wheels 0.06 rad per step towards +-0.6 (the joint stops at
0.4) and any other action turns them back, and every steer step cuts the gas, which then takes
two steps to return to 0.2. The expert therefore pulses: a pulse starts when the wheels are more
than `steer_tolerance` short of the pure-pursuit angle and goes on until they are `steer_hold`
past it, then gas lets them unwind. Longer pulses give the same mean wheel angle with fewer,
longer gas runs (measured: steering 2 steps in 4 gives a mean angle of 0.066 rad, 1 in 2 only
0.036, and the car accelerates faster), and with gas at 0.2 the lap time is set by how long
the car is on the gas. With `plan_horizon` > 0 (the discrete default) each step's action is
also checked against a few alternatives by simulating a copy of the car ahead (_Lookahead).
Continuous actions: the car is rear-wheel drive, so throttle is cut in proportion to steering
(full throttle while steering spins it out).

Off the road (the car's centre beyond the road's edge, as a policy it labels may leave it) the
expert steers back: towards a point further along its line by the distance beyond the edge, at
up to RECOVER_LOCK, the continuous car at no more than recover_speed. Its DAgger labels there
are the way back, not straight on across the grass (docs/studies/expert-way-back/).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.carracing.state import BRAKE_EXCESS, PLAN_AHEAD
from agents.carracing.wheel import WHEEL_LIMIT
from agents.experts import car_model
from nac.config import ConfigError

WHEELBASE = 3.24  # front to rear axle, Box2D units ((80 + 82) * car_dynamics.SIZE)
ROAD_HALF_WIDTH = 40 / 6  # car_racing.TRACK_WIDTH: the road's half-width, Box2D units
CAR_HALF_WIDTH = 1.4  # centre to the outer edge of a wheel ((55 + 14) * car_dynamics.SIZE)
RECOVER_LOCK = 0.3  # off the road: the most wheel angle (rad) steered towards it, so that a discrete pulse ends
# (at this angle plus steer_hold, short of the joint's stop at 0.42) and gas keeps the car moving


@dataclass
class TrackExpertConfig:
    continuous: bool = False  # action space: discrete (5 actions) or continuous (steer, gas, brake)
    line_room: float = 0.0  # racing line: how far it may leave the centreline (Box2D units; 0 = centreline)
    lookahead: float = 7.0  # pure-pursuit look-ahead at standstill (Box2D units)
    lookahead_per_speed: float = 0.25  # extra look-ahead per unit of speed
    lateral_accel: float = 250.0  # speed target in curves: v = sqrt(lateral_accel / curvature)
    braking_decel: float = 60.0  # assumed deceleration when planning for a curve ahead
    min_speed: float = 20.0  # never plan slower than this
    max_speed: float = math.inf  # never plan faster than this (u/s)
    speed_margin: float = 3.0  # discrete: brake when faster than target + margin
    coast: bool = False  # discrete: between the target and target + margin, coast (no action) instead of gas
    plan_brake: bool = True  # discrete, with plan_horizon: the look-ahead may also choose to brake (False: only the
    # speed rule brakes, so that the recorded speed_excess says when every brake comes)
    steer_tolerance: float = 0.02  # discrete: wheel-angle shortfall (rad) that starts a steer pulse
    steer_hold: float = 0.06  # discrete: a pulse goes on until the wheels are this far (rad) past the target
    gas_gain: float = 0.05  # continuous: throttle per unit of speed below target
    brake_gain: float = 0.03  # continuous: brake per unit of speed above target
    throttle_cut_in_turns: float = 0.8  # continuous: throttle *= 1 - cut * |steer|
    recover_speed: float = 35.0  # continuous: off the road, at most this speed (u/s) on the way back to it
    plan_horizon: int = 0  # discrete: steps simulated ahead to check each step's action (0: no look-ahead)

    def __post_init__(self) -> None:
        for name in ("lookahead", "lateral_accel", "braking_decel", "min_speed", "max_speed", "recover_speed"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"track expert: {name} must be > 0 (got {getattr(self, name)})")
        if not 0 <= self.throttle_cut_in_turns <= 1:
            raise ConfigError("track expert: throttle_cut_in_turns must be in [0, 1]")
        if self.plan_horizon < 0 or (self.plan_horizon and (self.continuous or self.plan_horizon < PLAN_AHEAD)):
            raise ConfigError(f"track expert: plan_horizon must be 0 or >= {PLAN_AHEAD}, and 0 for continuous actions (got {self.plan_horizon})")
        room = ROAD_HALF_WIDTH - CAR_HALF_WIDTH
        if not 0 <= self.line_room <= room:
            raise ConfigError(f"track expert: line_room must be in [0, {room:.2f}] so that the wheels stay on the road (got {self.line_room})")

    @classmethod
    def for_action_space(cls, continuous: bool) -> "TrackExpertConfig":
        """Defaults tuned per action space on seeds 200..299, never on the evaluation seeds 0..49.

        The discrete look-ahead's horizon and speed target were then chosen on the 19 longest
        tracks of seeds 200..799 (where laps are lost at step 1000) and checked on seeds 200..229.
        Its lateral_accel is above the car's grip (about 219 u/s^2): the base speed target is
        optimistic and the look-ahead brakes where the simulated car would leave the road.
        """
        if continuous:
            # Look-ahead 6 + 0.15 x speed keeps every wheel on the road, so that a policy imitating the line touches every
            # tile; the top speed of 75 u/s brakes for a bend only once it is in the camera's frame (about 37 units ahead),
            # so that a policy sees why it brakes (docs/studies/recipe-expert-margin/README.md, 'A top speed').
            return cls(continuous=True, lookahead=6.0, lookahead_per_speed=0.15, lateral_accel=180.0, braking_decel=90.0, max_speed=75.0)
        # The speed rule alone brakes (plan_brake=False), at a target the car can hold, so that the recorded speed excess
        # says when each brake comes; the continuous expert's top speed, held by coasting; line_room 3.0, the line its wheel
        # policies imitate best (docs/studies/discrete-heads/README.md, 'Discrete actions'; docs/studies/discrete-line-room).
        return cls(
            continuous=False, line_room=3.0, lookahead=9.0, lookahead_per_speed=0.15, lateral_accel=280.0,
            max_speed=75.0, speed_margin=BRAKE_EXCESS, coast=True, steer_tolerance=0.045, steer_hold=0.09,
            plan_horizon=40, plan_brake=False,
        )


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
        self.line_index = 0
        self.planner = _Lookahead(self.config.plan_horizon, self.config.plan_brake) if self.config.plan_horizon else None
        # after select_action: the front-wheel angle (radians, positive = left) its plan reaches PLAN_AHEAD steps
        # later (recorded with demonstrations as a smoother label than the pulses; NaN without a planner)
        self.planned_wheel_angle = math.nan
        # after select_action: the car's speed above the target speed here (u/s), from which it brakes (recorded with
        # demonstrations as a label that says how close to braking the car is on every step, not only when it brakes)
        self.speed_excess = math.nan

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "config": asdict(self.config)}

    def reset(self) -> None:
        track = self.env.unwrapped.track
        centre = np.array([(t[2], t[3]) for t in track], dtype=np.float64)  # (N, 2)
        beta = np.array([t[1] for t in track])  # the road's cross direction at each point
        normal = np.stack([np.cos(beta), np.sin(beta)], axis=1)
        self._pts = racing_line(centre, normal, self.config.line_room)  # (N, 2) the line driven
        self._road = [(cx, cy, nx, ny) for (cx, cy), (nx, ny) in zip(centre.tolist(), normal.tolist())]  # off-road test
        seg = np.roll(self._pts, -1, axis=0) - self._pts
        self._seg_len = np.linalg.norm(seg, axis=1)  # (N,) length of segment i -> i+1
        # Python lists for the per-step scalar lookups (numpy indexing costs ~10x more per element; the planner makes
        # about 200 lookups per step)
        self._pts_list = [tuple(p) for p in self._pts.tolist()]
        self._seg_list = self._seg_len.tolist()
        heading = np.arctan2(seg[:, 1], seg[:, 0])
        # Curve speed at each point from the heading change over the three segments before it.
        turn = np.abs((heading - np.roll(heading, 3) + np.pi) % (2 * np.pi) - np.pi)
        span = np.roll(self._seg_len, 2) + np.roll(self._seg_len, 1) + self._seg_len  # summed in this order as before
        v_curve = np.sqrt(self.config.lateral_accel / np.maximum(turn / np.maximum(span, 1e-3), 1e-4))
        self._v_curve_sq = (v_curve ** 2).tolist()
        self.line_index = 0
        self.pulse = 0  # discrete: the steer action of the pulse under way (1 or 2), 0 if none
        if self.planner is not None:
            self.planner.reset(self, centre, normal)

    def _nearest(self, x: float, y: float) -> int:
        n, pts, i = len(self._pts_list), self._pts_list, self.line_index
        best, best_d = i, math.inf
        for k in range(i - 5, i + 30):  # search near the last match: never jump laps
            px, py = pts[k % n]
            dx, dy = px - x, py - y
            d = dx * dx + dy * dy
            if d < best_d:  # the first of equal distances, as argmin
                best, best_d = k % n, d
        self.line_index = best
        return best

    def beyond_edge(self, i: int, x: float, y: float) -> float:
        """How far the point (x, y) is beyond the road's edge at centreline point i (negative: on the road)."""
        cx, cy, nx, ny = self._road[i]
        return abs((x - cx) * nx + (y - cy) * ny) - ROAD_HALF_WIDTH

    def _point_ahead(self, i: int, distance: float) -> tuple[float, float]:
        n, d, seg = len(self._pts), 0.0, self._seg_list
        while d < distance:
            d += seg[i]
            i = (i + 1) % n
        return self._pts_list[i]

    def target_speed(self, i: int, speed: float) -> float:
        """Slowest speed that the curves within the braking horizon allow from here."""
        cfg, n, seg, v2 = self.config, len(self._seg_list), self._seg_list, self._v_curve_sq
        horizon, decel2 = 10.0 + 0.9 * speed, 2 * cfg.braking_decel
        d, best, j = 0.0, math.inf, i
        while d < horizon:  # the points ahead, up to the first at or past the horizon
            j = (j + 1) % n
            d += seg[j]  # as before: the distance to point j counts segment j, not j - 1
            best = min(best, v2[j] + decel2 * max(d - 5.0, 0.0))
        best = math.sqrt(best)  # the least root is the root of the least: sqrt is monotone and correctly rounded
        return float(min(max(best, cfg.min_speed), cfg.max_speed))

    def select_action(self, obs: Any = None) -> int | np.ndarray:
        car = self.env.unwrapped.car
        if self.planner is not None:
            action, self.planned_wheel_angle = self.planner.choose(self, car)
            return action
        return self.base_action(car)

    def base_action(self, car: Any) -> int | np.ndarray:
        """The action for a car (the environment's, or the planner's simulated one)."""
        cfg = self.config
        hull = car.hull
        # Scalars, not 2-vector numpy arrays (1.2x faster per planned step); the same operations
        # as numpy's (dot products, np.sin/arctan2/hypot), so the actions are the same to the bit.
        x, y = hull.position
        vx, vy = hull.linearVelocity
        speed = math.sqrt(vx * vx + vy * vy)
        (fx, fy), (rx, ry) = hull.GetWorldVector((0, 1)), hull.GetWorldVector((1, 0))
        i = self._nearest(x, y)
        reach = cfg.lookahead + cfg.lookahead_per_speed * speed
        beyond = self.beyond_edge(i, x, y)
        # Off the road the target is further ahead by the distance beyond the road's edge, so that the car comes back
        # at a slant instead of orbiting a point beside it.
        tx, ty = self._point_ahead(i, reach if beyond <= 0 else reach + beyond)
        x_right, y_fwd = (tx - x) * rx + (ty - y) * ry, (tx - x) * fx + (ty - y) * fy
        alpha = np.arctan2(x_right, y_fwd)
        # Pure pursuit: wheel angle (positive = right) that puts the target on the car's arc.
        delta = float(np.arctan2(2 * WHEELBASE * np.sin(alpha), max(np.hypot(x_right, y_fwd), 1e-3)))
        v_target = self.target_speed(i, speed)
        if beyond > 0:
            # Off the road the arc to a far target is nearly straight, and to one behind the car there is none: the car
            # drove on across the grass. The way back: the arc through the target as if it were `reach` away (full lock
            # once it is behind), at most RECOVER_LOCK, so that discrete pulses end and gas keeps the car moving.
            lean = math.sin(alpha) if abs(alpha) < math.pi / 2 else math.copysign(1.0, alpha)
            arc = math.atan2(2 * WHEELBASE * lean, min(math.hypot(x_right, y_fwd), reach))
            delta = max(-RECOVER_LOCK, min(RECOVER_LOCK, arc))
            if cfg.continuous:  # with more, the rear-wheel-drive car spins on the grass (the discrete car's gas is weak)
                v_target = min(v_target, cfg.recover_speed)
        if car is self.env.unwrapped.car:  # the real car, not one the planner simulates
            self.speed_excess = speed - v_target
        if cfg.continuous:
            steer = float(np.clip(delta / WHEEL_LIMIT, -1.0, 1.0))
            err = v_target - speed
            gas = float(np.clip(cfg.gas_gain * err, 0.0, 1.0)) * (1.0 - cfg.throttle_cut_in_turns * abs(steer))
            brake = float(np.clip(-cfg.brake_gain * err, 0.0, 0.8))
            return np.array([steer, gas, brake], dtype=np.float32)
        if speed > v_target + cfg.speed_margin:
            self.pulse = 0
            return 4
        action = self.steer_pulse(delta, -float(car.wheels[0].joint.angle))
        # With coast, above the target speed no action replaces gas (the wheels unwind under either): a discrete car
        # cannot hold a speed, and this holds it near the target without braking
        return 0 if action == 3 and cfg.coast and speed > v_target else action

    def steer_pulse(self, delta: float, wheel: float) -> int:
        """Discrete steering towards the wheel angle delta (both right-positive), see the module doc."""
        cfg = self.config
        if self.pulse == 1 and delta > 0 and wheel < delta + cfg.steer_hold:
            return 1
        if self.pulse == 2 and delta < 0 and wheel > delta - cfg.steer_hold:
            return 2
        self.pulse = 0
        if delta > 0 and wheel < delta - cfg.steer_tolerance:
            self.pulse = 1
        elif delta < 0 and wheel > delta + cfg.steer_tolerance:
            self.pulse = 2
        return self.pulse or 3  # gas: engine on, wheels unwind towards straight


def racing_line(centre: np.ndarray, normal: np.ndarray, room: float, iterations: int = 3000) -> np.ndarray:
    """A smoother line through a closed track: each point moved along its normal by at most room.

    Minimises the sum of squared second differences of the points (a discrete curvature) by
    projected gradient descent on the offsets: the classic minimum-curvature racing line. Written
    here because it is thirty lines of numpy and the project has no optimisation library (scipy
    is not a dependency). Offsets stay within [-room, room]; room 0 returns the centreline.
    """
    if room <= 0:
        return centre.copy()
    offset = np.zeros(len(centre))
    for _ in range(iterations):
        p = centre + offset[:, None] * normal
        d2 = np.roll(p, 1, axis=0) - 2 * p + np.roll(p, -1, axis=0)
        grad = np.roll(d2, 1, axis=0) - 2 * d2 + np.roll(d2, -1, axis=0)  # gradient of sum |d2|^2 / 2
        # Step 0.06 < 1/16, the stability limit of this fourth-difference operator.
        offset = np.clip(offset - 0.06 * np.einsum("ij,ij->i", grad, normal), -room, room)
    return centre + offset[:, None] * normal


class _Lookahead:
    """Checks each discrete action against a few alternatives by simulating the car ahead.

    For the expert's action and each alternative below (an action held for 1, 3 or 6 steps), the
    car is driven `horizon` steps from its present state on a model of it (agents.experts.car_model:
    the car as one rigid body, within millimetres of Box2D's over a rollout), the expert taking over
    after the alternative; every candidate is rolled out in one compiled call. Score: distance gained
    along the line, plus 0.3 s of the final speed, minus 0.5 per step with a wheel off the road
    (grass grip is applied to that wheel) and 1000 per step more than 2 units off. The best wins if
    it beats the expert's own action by 0.05; where every candidate is still more than 2 units off
    at the horizon (a car far out on the grass), the expert's own action, its way back, is taken.
    This is one step of policy improvement by rollouts (Bertsekas): written here because no library
    plans on a CarRacing car, and it needs the environment's privileged state.
    """

    CANDIDATES = ((1, 1), (2, 1), (3, 1), (4, 1), (3, 3), (3, 6))  # (action, steps held)
    SPEED_WEIGHT = 0.3  # seconds of the final speed added to the distance
    OFF_ROAD, LOST, LOST_BEYOND, MARGIN = 0.5, 1000.0, 2.0, 0.05

    def __init__(self, horizon: int, brake: bool = True) -> None:
        self.horizon = horizon
        self.candidates = self.CANDIDATES if brake else tuple(c for c in self.CANDIDATES if c[0] != 4)
        self.weights = np.array([self.SPEED_WEIGHT, self.OFF_ROAD, self.LOST, self.LOST_BEYOND])
        self._car: Any = None

    def reset(self, expert: "TrackFollowingExpert", centre: np.ndarray, normal: np.ndarray) -> None:
        cfg = expert.config
        self.centre, self.normal = np.ascontiguousarray(centre, dtype=np.float64), np.ascontiguousarray(normal, dtype=np.float64)
        self.line = (np.ascontiguousarray(expert._pts, dtype=np.float64), np.asarray(expert._seg_len, dtype=np.float64),
                     np.asarray(expert._v_curve_sq, dtype=np.float64))
        self.cfg = np.array([cfg.lookahead, cfg.lookahead_per_speed, cfg.braking_decel, cfg.min_speed, cfg.max_speed,
                             cfg.speed_margin, float(cfg.coast), cfg.steer_tolerance, cfg.steer_hold, WHEELBASE, ROAD_HALF_WIDTH,
                             RECOVER_LOCK])

    def choose(self, expert: "TrackFollowingExpert", real: Any) -> tuple[int, float]:
        """The action, and the wheel angle its rollout reaches PLAN_AHEAD steps later."""
        if self._car is not real:  # a new episode's car: its masses, read once
            self._consts, self._car = car_model.car_constants(real), real
        idx, pulse = expert.line_index, expert.pulse
        base = int(expert.base_action(real))
        cands = [(base, 1)] + [c for c in self.candidates if c != (base, 1)]
        scores, ahead, lost = car_model.rollouts(
            car_model.car_state(real, self._consts), self._consts, car_model.WHEEL_ANCHORS, *self.line, self.centre,
            self.normal, self.cfg, np.array(cands, dtype=np.int64), idx, pulse, self.horizon, PLAN_AHEAD, self.weights)
        if lost.all():
            # No alternative is back on the road at the horizon: the score (distance along the line) cannot compare
            # ways back, and on the grass it favoured driving on; the base action's way back is taken.
            return base, float(ahead[0])
        best = int(np.argmax(scores))  # the first of equal scores, the expert's own action first
        if scores[best] > scores[0] + self.MARGIN:
            action = cands[best][0]
            expert.pulse = action if action in (1, 2) else 0
            return action, float(ahead[best])
        return base, float(ahead[0])
