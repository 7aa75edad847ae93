"""The discrete track expert's look-ahead, every alternative rolled out together on a model of the car.

gymnasium's car is five Box2D bodies (the hull and four wheels) held together by revolute joints
that Box2D solves with 180 velocity iterations a step: in effect one rigid body whose front wheels
turn. The model here is that rigid body: the hull's and wheels' masses and inertias combined about
their common centre, each wheel's force computed as car_dynamics.Car.step computes it (engine,
brakes, wheel spin, grip limited by the road or the grass under the wheel) from the velocity of
the point it sits on, summed into one force and one torque, and integrated as Box2D integrates
(velocity first, then position, speed capped at Box2D's 2 units a step); the front-wheel joint
turns at its motor's speed up to where it stops (agents.carracing.wheel.wheel_after). Over 40-step rollouts
from states of the expert's own episodes it stays within millimetres of Box2D's car
(tests/agents/experts/test_car_model.py). The expert's rule (agents.experts.track.TrackFollowingExpert:
pure pursuit on its line, its target speed, its steering pulses) is the same arithmetic here,
scalar, so that one compiled call rolls out every candidate of a step.

Written here, compiled with numba: no library simulates a CarRacing car, and Box2D cannot be
called from compiled code; numba compiles these loops once per machine (cached beside the module).
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from gymnasium.envs.box2d import car_dynamics as cd

from agents.carracing.env import FPS
from agents.carracing.wheel import WHEEL_STOP

DT = 1.0 / FPS
MAX_STEP = 2.0  # Box2D's b2_maxTranslation: no body moves further in one step (100 u/s at 50 steps a second)
WHEEL_ANCHORS = np.array(cd.WHEELPOS, dtype=np.float64) * cd.SIZE  # (4, 2) wheel centres in the hull's frame

# Indices into the car state vector (one float64 array, so that numba takes it as one argument)
PX, PY, VX, VY, ANG, AVEL = 0, 1, 2, 3, 4, 5  # the centre of mass of the whole car, its velocity, heading, turn rate
JOINT, OMEGA, GAS, BRAKE, STEER = 6, 10, 14, 18, 22  # per wheel (4 each): joint angle, spin, gas, brake, steer aim
STATE = 26


def car_constants(car: Any) -> np.ndarray:
    """(total mass, inertia about the common centre, the common centre in the hull's frame (x, y),
    the hull's own centre there (x, y), the wheel radius, the hull's mass) of a car_dynamics.Car."""
    hull, wheel = car.hull, car.wheels[0]
    mh, ch = float(hull.mass), np.array(tuple(hull.localCenter), dtype=np.float64)
    ih = float(hull.inertia) - mh * float(ch @ ch)  # Box2D's inertia is about the body's origin
    mw, iw = float(wheel.mass), float(wheel.inertia)
    total = mh + 4 * mw
    com = (mh * ch + mw * WHEEL_ANCHORS.sum(axis=0)) / total
    inertia = ih + mh * float((ch - com) @ (ch - com)) + sum(iw + mw * float((a - com) @ (a - com)) for a in WHEEL_ANCHORS)
    return np.array([total, inertia, com[0], com[1], ch[0], ch[1], float(wheel.wheel_rad), mh])


def car_state(car: Any, consts: np.ndarray) -> np.ndarray:
    """The model's state (STATE,) of a car_dynamics.Car as Box2D holds it now."""
    s = np.zeros(STATE)
    hull = car.hull
    angle = float(hull.angle)
    c, sn = math.cos(angle), math.sin(angle)
    ox, oy = hull.position
    s[PX] = ox + c * consts[2] - sn * consts[3]
    s[PY] = oy + sn * consts[2] + c * consts[3]
    bodies = [hull, *car.wheels]
    s[VX] = sum(float(b.mass) * b.linearVelocity[0] for b in bodies) / consts[0]  # the momentum's velocity
    s[VY] = sum(float(b.mass) * b.linearVelocity[1] for b in bodies) / consts[0]
    s[ANG], s[AVEL] = angle, float(hull.angularVelocity)
    for k, w in enumerate(car.wheels):
        s[JOINT + k], s[OMEGA + k], s[GAS + k] = float(w.joint.angle), float(w.omega), float(w.gas)
        s[BRAKE + k], s[STEER + k] = float(w.brake), float(w.steer)
    return s


@numba.njit(cache=True)
def _sign(x: float) -> float:
    return 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)


@numba.njit(cache=True)
def model_step(s: np.ndarray, action: int, on_road: np.ndarray, consts: np.ndarray, anchors: np.ndarray) -> None:
    """One environment step of the model in place: CarRacing-v3's discrete action (steer, gas,
    brake as car_dynamics sets them), each wheel's force as car_dynamics.Car.step computes it
    (on_road[k]: grip of the road, else of the grass), then Box2D's integration of the rigid car."""
    steer = -0.6 if action == 1 else (0.6 if action == 2 else 0.0)
    s[STEER] = steer
    s[STEER + 1] = steer
    gas = 0.2 if action == 3 else 0.0
    for k in range(2, 4):  # rear-wheel drive: gas rises by at most 0.1 a step, and stops at once
        s[GAS + k] += min(gas - s[GAS + k], 0.1)
    brake = 0.8 if action == 4 else 0.0
    size2 = 205000 * cd.SIZE * cd.SIZE
    w_inertia, power, limit = cd.WHEEL_MOMENT_OF_INERTIA, cd.ENGINE_POWER, cd.FRICTION_LIMIT
    mass, inertia, cx, cy, radius = consts[0], consts[1], consts[2], consts[3], consts[6]
    c, sn = math.cos(s[ANG]), math.sin(s[ANG])
    fx_sum, fy_sum, torque = 0.0, 0.0, 0.0
    for k in range(4):
        s[BRAKE + k] = brake
        grip = limit * (1.0 if on_road[k] else 0.6)
        a = s[ANG] + s[JOINT + k]
        ca, sa = math.cos(a), math.sin(a)
        forw_x, forw_y, side_x, side_y = -sa, ca, ca, sa  # the wheel's (0, 1) and (1, 0) in the world
        ax, ay = anchors[k, 0] - cx, anchors[k, 1] - cy
        rx, ry = c * ax - sn * ay, sn * ax + c * ay  # from the centre of mass to the wheel
        vx, vy = s[VX] - s[AVEL] * ry, s[VY] + s[AVEL] * rx  # the wheel's velocity
        vf = forw_x * vx + forw_y * vy
        vs = side_x * vx + side_y * vy
        om = s[OMEGA + k]
        om += DT * power * s[GAS + k] / w_inertia / (abs(om) + 5.0)
        if brake >= 0.9:
            om = 0.0
        elif brake > 0:
            val = 15 * brake  # car_dynamics' BRAKE_FORCE, radians per second
            if val > abs(om):
                val = abs(om)
            om -= _sign(om) * val
        f_force = (-vf + om * radius) * size2
        p_force = -vs * size2
        force = math.sqrt(f_force * f_force + p_force * p_force)
        if force > grip:
            f_force = f_force / force * grip
            p_force = p_force / force * grip
        om -= DT * f_force * radius / w_inertia
        s[OMEGA + k] = om
        fx = p_force * side_x + f_force * forw_x
        fy = p_force * side_y + f_force * forw_y
        fx_sum += fx
        fy_sum += fy
        torque += rx * fy - ry * fx
    s[VX] += DT * fx_sum / mass
    s[VY] += DT * fy_sum / mass
    s[AVEL] += DT * torque / inertia
    travel = math.sqrt(s[VX] * s[VX] + s[VY] * s[VY]) * DT
    if travel > MAX_STEP:
        s[VX] *= MAX_STEP / travel
        s[VY] *= MAX_STEP / travel
    s[PX] += DT * s[VX]
    s[PY] += DT * s[VY]
    s[ANG] += DT * s[AVEL]
    for k in range(4):  # the joint motor: min(50 |aim - angle|, 3) rad/s towards the aim, up to the stop
        diff = s[STEER + k] - s[JOINT + k]
        s[JOINT + k] = min(max(s[JOINT + k] + _sign(diff) * min(abs(diff), 3.0 * DT), -WHEEL_STOP), WHEEL_STOP)


@numba.njit(cache=True)
def hull_pose(s: np.ndarray, consts: np.ndarray) -> tuple[float, float, float, float]:
    """The hull's origin (x, y) and its centre's velocity (vx, vy), as the expert reads them off Box2D."""
    c, sn = math.cos(s[ANG]), math.sin(s[ANG])
    ox = s[PX] - (c * consts[2] - sn * consts[3])
    oy = s[PY] - (sn * consts[2] + c * consts[3])
    hx, hy = consts[4] - consts[2], consts[5] - consts[3]  # the hull's centre from the common one
    rx, ry = c * hx - sn * hy, sn * hx + c * hy
    return ox, oy, s[VX] - s[AVEL] * ry, s[VY] + s[AVEL] * rx


@numba.njit(cache=True)
def nearest(pts: np.ndarray, i: int, x: float, y: float) -> int:
    """TrackFollowingExpert._nearest: the closest line point from i - 5 to i + 29 (the first of equals)."""
    n = pts.shape[0]
    best, best_d = i, np.inf
    for k in range(i - 5, i + 30):
        j = k % n
        dx, dy = pts[j, 0] - x, pts[j, 1] - y
        d = dx * dx + dy * dy
        if d < best_d:
            best, best_d = j, d
    return best


@numba.njit(cache=True)
def base_action(s: np.ndarray, consts: np.ndarray, pts: np.ndarray, seg: np.ndarray, v2: np.ndarray, centre: np.ndarray,
                normal: np.ndarray, cfg: np.ndarray, idx: int, pulse: int) -> tuple[int, int, int]:
    """TrackFollowingExpert.base_action for a discrete expert on the model's car: (action, its
    index on the line, its steering pulse). cfg: lookahead, lookahead_per_speed, braking_decel,
    min_speed, max_speed, speed_margin, coast, steer_tolerance, steer_hold, wheelbase, road half-width,
    the most wheel angle off the road (RECOVER_LOCK)."""
    x, y, vx, vy = hull_pose(s, consts)
    speed = math.sqrt(vx * vx + vy * vy)
    c, sn = math.cos(s[ANG]), math.sin(s[ANG])
    fx, fy, rx, ry = -sn, c, c, sn
    i = nearest(pts, idx, x, y)
    n = pts.shape[0]
    reach = cfg[0] + cfg[1] * speed
    beyond = abs((x - centre[i, 0]) * normal[i, 0] + (y - centre[i, 1]) * normal[i, 1]) - cfg[10]
    j, d, far = i, 0.0, reach if beyond <= 0 else reach + beyond
    while d < far:  # _point_ahead
        d += seg[j]
        j = (j + 1) % n
    tx, ty = pts[j, 0], pts[j, 1]
    x_right = (tx - x) * rx + (ty - y) * ry
    y_fwd = (tx - x) * fx + (ty - y) * fy
    alpha = math.atan2(x_right, y_fwd)
    delta = math.atan2(2 * cfg[9] * math.sin(alpha), max(math.hypot(x_right, y_fwd), 1e-3))
    horizon, decel2 = 10.0 + 0.9 * speed, 2 * cfg[2]  # target_speed
    d, best, j = 0.0, np.inf, i
    while d < horizon:
        j = (j + 1) % n
        d += seg[j]
        best = min(best, v2[j] + decel2 * max(d - 5.0, 0.0))
    v_target = min(max(math.sqrt(best), cfg[3]), cfg[4])
    if beyond > 0:  # off the road: the way back
        lean = math.sin(alpha) if abs(alpha) < math.pi / 2 else math.copysign(1.0, alpha)
        arc = math.atan2(2 * cfg[9] * lean, min(math.hypot(x_right, y_fwd), reach))
        delta = max(-cfg[11], min(cfg[11], arc))
    if speed > v_target + cfg[5]:
        return 4, i, 0
    wheel = -s[JOINT]  # right-positive, as delta
    tol, hold = cfg[7], cfg[8]
    if pulse == 1 and delta > 0 and wheel < delta + hold:
        return 1, i, 1
    if pulse == 2 and delta < 0 and wheel > delta - hold:
        return 2, i, 2
    pulse = 0
    if delta > 0 and wheel < delta - tol:
        pulse = 1
    elif delta < 0 and wheel > delta + tol:
        pulse = 2
    action = pulse if pulse else 3
    if action == 3 and cfg[6] > 0 and speed > v_target:
        action = 0  # coast
    return action, i, pulse


@numba.njit(cache=True)
def rollouts(start: np.ndarray, consts: np.ndarray, anchors: np.ndarray, pts: np.ndarray, seg: np.ndarray,
             v2: np.ndarray, centre: np.ndarray, normal: np.ndarray, cfg: np.ndarray, candidates: np.ndarray,
             idx0: int, pulse0: int, horizon: int, ahead: int, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every candidate (action, steps held) rolled out `horizon` steps from the car state `start`,
    the expert driving after the held action: (score, the front-wheel joint angle after `ahead`
    steps, whether a wheel is still more than weights[3] off the road on the last step) per
    candidate. The score is _Lookahead's: distance gained along the line, plus weights[0] seconds
    of the final speed, minus weights[1] per step with a wheel off the road and weights[2] per
    step with one more than weights[3] off it."""
    n_c, n = candidates.shape[0], pts.shape[0]
    scores, wheel_ahead, lost = np.empty(n_c), np.empty(n_c), np.empty(n_c, dtype=np.bool_)
    on_road = np.empty(4, dtype=np.bool_)
    half_width = cfg[10]
    for ci in range(n_c):
        s = start.copy()
        idx, pulse, penalty = idx0, pulse0, 0.0
        for t in range(horizon):
            a, idx, pulse = base_action(s, consts, pts, seg, v2, centre, normal, cfg, idx, pulse)
            if t < candidates[ci, 1]:
                a = candidates[ci, 0]
                pulse = a if (a == 1 or a == 2) else 0
            cx, cy, nx, ny, worst = centre[idx, 0], centre[idx, 1], normal[idx, 0], normal[idx, 1], 0.0
            c, sn = math.cos(s[ANG]), math.sin(s[ANG])
            for k in range(4):
                ax, ay = anchors[k, 0] - consts[2], anchors[k, 1] - consts[3]
                wx, wy = s[PX] + c * ax - sn * ay, s[PY] + sn * ax + c * ay
                off = abs((wx - cx) * nx + (wy - cy) * ny) - half_width
                on_road[k] = off <= 0
                worst = max(worst, off)
            penalty += weights[1] * (worst > 0) + weights[2] * (worst > weights[3])
            lost[ci] = worst > weights[3]
            model_step(s, a, on_road, consts, anchors)
            if t == ahead - 1:
                wheel_ahead[ci] = s[JOINT]
        x, y, vx, vy = hull_pose(s, consts)
        end = nearest(pts, idx, x, y)
        gained = 0.0
        for k in range((end - idx0) % n):
            gained += seg[(idx0 + k) % n]
        e1 = (end + 1) % n
        sx, sy = pts[e1, 0] - pts[end, 0], pts[e1, 1] - pts[end, 1]
        gained += ((x - pts[end, 0]) * sx + (y - pts[end, 1]) * sy) / max(math.sqrt(sx * sx + sy * sy), 1e-6)
        scores[ci] = gained + weights[0] * math.sqrt(vx * vx + vy * vy) - penalty
    return scores, wheel_ahead, lost
