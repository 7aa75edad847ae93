"""CarRacing-v3 from gymnasium, and the privileged state the experts and recorders read."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

import gymnasium as gym
import numpy as np
import pygame
from gymnasium.envs.box2d import car_racing
from gymnasium.envs.box2d.car_racing import CarRacing
from gymnasium.wrappers import TimeLimit
from pygame import gfxdraw

from agents.carracing.render import DirectRenderer, blit_array, draw_scenario, road_polygons, view
from agents.carracing.scenarios import CLEAN, Scenario
from nac.config import ConfigError, need

ENV_ID = "CarRacing-v3"  # gymnasium's environment
FAST_ID = "nacdrive/CarRacing-v3"  # the same, drawn faster (FastCarRacing): what make_env builds and recordings name
# How FastCarRacing draws its observation: "direct" draws the 96 x 96 frame at six times its size and averages it
# down (agents.carracing.render: several times faster, and close enough to gymnasium's frame that policies trained on either
# drive alike); "gymnasium" draws gymnasium's very pixels (its 1000 x 800 window, smooth-scaled).
RENDERERS = ("direct", "gymnasium")
RENDERER = "direct"
FPS = 50  # CarRacing's physics and frame rate (gymnasium.envs.box2d.car_racing.FPS)
EPISODE_STEPS = 1000  # gymnasium's TimeLimit for CarRacing-v3
RETURN_BOUNDS = (-200.0, 1000.0)  # every return an episode can have: 1000 for all tiles, less 0.1 a step; -100 for leaving the
# playfield, at the latest at the last step
# The action space of every command that drives or records: continuous (steer, gas, brake), the shipped policies', with
# --discrete for CarRacing's 5 discrete actions; --continuous, the switch before continuous was the default, says so
CONTINUOUS = {"negated": "discrete", "negated_help": "5 discrete actions (noop, right, left, gas, brake) instead of continuous "
              "(steer, gas, brake)", "retired": "continuous actions are the default (--discrete for 5 discrete actions)"}
# Discrete actions of CarRacing-v3 (note: 1 steers RIGHT, 2 LEFT; gas is only 0.2).
ACTIONS = ("noop", "right", "left", "gas", "brake")
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


# The speed bar of CarRacing's instrument panel (car_racing._render_indicators): a white bar from
# x = 125 to 150 and up from y = 780 by 0.4 px per u/s of the car's speed, drawn on the 1000 x 800
# window that smoothscale shrinks to the 96 x 96 frame: columns 12 and 13 hold it whole, at 0.048 rows
# per u/s; the black panel below the track starts at row 84.
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


def check_renderer(renderer: str) -> None:
    need(renderer in RENDERERS, f"renderer must be one of {', '.join(RENDERERS)} (got {renderer!r})")


class FastCarRacing(CarRacing):
    """CarRacing-v3 with its observation drawn faster: by agents.carracing.render.DirectRenderer (renderer
    "direct"), or as gymnasium draws it, to the very pixel, about twice as fast ("gymnasium").

    gymnasium's `_render_road` moves each of the ~700 grass and road polygons to the screen one
    vertex at a time in Python (pygame.Vector2 rotations) to find the ~80 in view, every step:
    three quarters of a recorded step's time. This does that arithmetic on numpy arrays and draws the
    polygons in view with the same gfxdraw calls, in the same order, from the same float
    coordinates (the rotation's cosine and sine are pygame's own, so its special cases at right
    angles carry over): tests/agents/carracing/test_env.py checks the frames equal gymnasium's bit for bit.
    Written here because gymnasium offers no faster renderer."""

    def __init__(self, *args, renderer: str = RENDERER, scenario: str = CLEAN, **kwargs) -> None:
        check_renderer(renderer)
        if kwargs.pop("domain_randomize", False):  # gymnasium's own flag names the scenario too
            scenario = "domain-randomize"
        self.scenario = Scenario(scenario)  # agents.carracing.scenarios: what the frames show, drawn by either renderer
        super().__init__(*args, domain_randomize=scenario == "domain-randomize", **kwargs)
        self.renderer = renderer
        self._direct = DirectRenderer() if renderer == "direct" else None

    def _render(self, mode: str):  # type: ignore[override]
        if mode == "state_pixels" and self._direct is not None and "t" in self.__dict__:
            return self._direct.frame(self)
        return super()._render(mode)

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # type: ignore[override]
        self._road_shapes: tuple[np.ndarray, list] | None = None  # the new track's, built at the first frame
        self.scenario.reset(self, seed)
        return super().reset(seed=seed, options=options)

    def _shapes(self) -> tuple[np.ndarray, list]:
        """agents.carracing.render.road_polygons of the present track, built at its first frame."""
        if getattr(self, "_road_shapes", None) is None:
            self._road_shapes = road_polygons(self)
        return self._road_shapes

    def _render_road(self, zoom, translation, angle):  # type: ignore[override]
        if self.scenario.grass_squares:
            b = car_racing.PLAYFIELD
            field = [(b, b), (b, -b), (-b, -b), (-b, b)]
            self._draw_colored_polygon(self.surf, field, self.bg_color, zoom, translation, angle, clip=False)
        else:  # noise, drawn as the window shows it, and this surface is flipped after
            blit_array(self.surf, self.scenario.background(car_racing.WINDOW_W, car_racing.WINDOW_H, *view(self))[::-1])
        verts, colours = self._shapes()  # every road polygon of CarRacing-v3 is a quadrilateral
        cos, sin = pygame.math.Vector2(1.0, 0.0).rotate_rad(angle)  # exactly the factors Vector2.rotate_rad uses
        x, y = verts[..., 0], verts[..., 1]
        px = (cos * x - sin * y) * zoom + translation[0]
        py = (sin * x + cos * y) * zoom + translation[1]
        m = car_racing.MAX_SHAPE_DIM
        near = (px >= -m) & (px <= car_racing.WINDOW_W + m) & (py >= -m) & (py <= car_racing.WINDOW_H + m)
        for i in np.flatnonzero(near.any(axis=1)):
            c = colours[i]
            if c is None and not self.scenario.grass_squares:
                continue
            colour = self.grass_color if c is None else [int(v) for v in c]
            poly = list(zip(px[i].tolist(), py[i].tolist()))
            gfxdraw.aapolygon(self.surf, poly, colour)
            gfxdraw.filled_polygon(self.surf, poly, colour)

    def _render_indicators(self, W, H):  # type: ignore[override]
        super()._render_indicators(W, H)
        if self.scenario.draws_over:  # on the flipped window, the strip not yet drawn over
            draw_scenario(self.surf, self, *view(self), H - H * 5 // 40)


gym.register(FAST_ID, entry_point="agents.carracing.env:FastCarRacing", max_episode_steps=EPISODE_STEPS)  # a string: specs are serialised (Minari)


class _NoPixelsCarRacing(FastCarRacing):
    """CarRacing that skips drawing the observation (observations are None).

    For jobs that read only the privileged state (evaluating the track expert): drawing the
    96x96 frame is most of a step's cost, and the physics do not depend on it.
    """

    def _render(self, mode: str):  # type: ignore[override]
        if mode == "state_pixels":
            return None
        return super()._render(mode)


def make_env(continuous: bool = False, max_steps: int = EPISODE_STEPS, pixels: bool = True, renderer: str = RENDERER,
             scenario: str = CLEAN) -> gym.Env:
    """CarRacing-v3 with the given action space, ending after max_steps steps, its frames drawn by
    `renderer` (RENDERERS) in `scenario` (agents.carracing.scenarios.SCENARIOS)."""
    if pixels:
        return gym.make(FAST_ID, continuous=continuous, max_episode_steps=max_steps, renderer=renderer, scenario=scenario)
    return TimeLimit(_NoPixelsCarRacing(continuous=continuous, scenario=scenario), max_episode_steps=max_steps)


def wheels_off_road(env: gym.Env) -> int:
    """How many of the car's four wheels touch no road tile (CarRacing keeps each wheel's tiles)."""
    return sum(not w.tiles for w in env.unwrapped.car.wheels)


class OffRoadLimit(gym.Wrapper):
    """Truncates an episode once the car has had all four wheels off the road for `steps` steps
    in a row (info["off_road"] = True on that step). For DAgger rollouts: the expert's labels for
    the way back to the road are kept, not the hundreds of frames of a car lost on the grass.
    Written here: gymnasium has no such wrapper, and the road contact is CarRacing's own (each
    wheel's set of tiles under it)."""

    def __init__(self, env: gym.Env, steps: int) -> None:
        super().__init__(env)
        self.steps = steps
        self._off = 0

    def reset(self, **kwargs):  # type: ignore[override]
        self._off = 0
        return self.env.reset(**kwargs)

    def step(self, action):  # type: ignore[override]
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._off = self._off + 1 if wheels_off_road(self.env) == 4 else 0
        if self._off >= self.steps and not terminated:
            truncated, info = True, {**info, "off_road": True}
        return obs, reward, terminated, truncated, info


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
SKIP_GAP = 20  # skipped_tiles: a run of untouched tiles this long or longer ends the car's progress
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


def skipped_tiles(env: gym.Env) -> int:
    """Tiles the car has driven past without touching them.

    CarRacing-v3 counts a lap only once every tile has been touched (its other rule, touching
    tile 0 after 95 %, cannot fire: tile 0 is touched at the start), so one skipped tile, a
    hairpin's inside cut over the grass, costs the lap: the car must drive round again for it,
    at -0.1 a step, and the episode usually ends at step 1000 at 97-99 % of the tiles. The car's
    progress is followed from tile 0 over runs of fewer than SKIP_GAP untouched tiles; the
    untouched tiles within it are the skipped ones (the stretch not reached yet is not).
    """
    u = env.unwrapped
    visited = [False] * len(u.track)
    for tile in u.road:
        visited[tile.idx] = bool(tile.road_visited)
    gap, skipped = 0, 0
    for v in visited:
        if v:
            skipped, gap = skipped + gap, 0
        else:
            gap += 1
            if gap >= SKIP_GAP:
                break
    return skipped


BEND_SEGMENTS = 12  # sharpest_bend: a bend is the heading change over this many track segments (about 42 units)


def sharpest_bend(env: gym.Env) -> float:
    """The track's sharpest bend: the largest change of its heading (degrees) over BEND_SEGMENTS consecutive segments,
    around the closed loop. About one track in six turns 150 degrees or more (a hairpin), where the discrete policies
    lose their tracks (docs/studies/quickstart-discrete-rounds/, 'What the lost tracks have in common')."""
    beta = np.array([t[1] for t in env.unwrapped.track])  # the road's direction angle at each point
    turn = (np.roll(beta, -1) - beta + np.pi) % (2 * np.pi) - np.pi  # (N,) each segment's heading change
    window = np.convolve(np.concatenate([turn, turn[: BEND_SEGMENTS - 1]]), np.ones(BEND_SEGMENTS), "valid")
    return float(np.degrees(np.abs(window).max()))


def seeds_with_bend(start: int, count: int, degrees: float, skip: int = 0, scan: int = 10_000) -> list[int]:
    """The seeds from `start` on whose track bends at least `degrees` (sharpest_bend), the first `skip` of them passed
    over, `count` of them; among at most `scan` seeds."""
    env, found = make_env(pixels=False), []
    try:
        for seed in range(start, start + scan):
            env.reset(seed=seed)
            if sharpest_bend(env) >= degrees:
                found.append(seed)
                if len(found) == skip + count:
                    return found[skip:]
    finally:
        env.close()
    raise ConfigError(f"only {len(found)} of seeds {start}..{start + scan - 1} have a track bending {degrees:g} degrees within "
                      f"{BEND_SEGMENTS} segments, {skip + count} wanted; ask for a smaller bend (about one track in six reaches 150)")


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
