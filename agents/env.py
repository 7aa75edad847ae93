"""CarRacing-v3 from gymnasium, and the privileged state the experts and recorders read."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.envs.box2d.car_racing import CarRacing
from gymnasium.wrappers import TimeLimit

ENV_ID = "CarRacing-v3"
FPS = 50  # CarRacing's physics and frame rate (gymnasium.envs.box2d.car_racing.FPS)
EPISODE_STEPS = 1000  # gymnasium's TimeLimit for CarRacing-v3
SELECT_SEED = 20_000  # closed-loop checkpoint selection (train --select-episodes) drives seeds from here: apart from
# demonstrations (0..), the held-out seeds of evaluations (10000..) and DAgger's rollouts (1 000 000..)
# Discrete actions of CarRacing-v3 (note: 1 steers RIGHT, 2 LEFT; gas is only 0.2).
ACTIONS = ("noop", "right", "left", "gas", "brake")


class _NoPixelsCarRacing(CarRacing):
    """CarRacing that skips drawing the observation (observations are None).

    For jobs that read only the privileged state (evaluating the track expert): drawing the
    96x96 frame is most of a step's cost, and the physics do not depend on it.
    """

    def _render(self, mode: str):  # type: ignore[override]
        if mode == "state_pixels":
            return None
        return super()._render(mode)


def make_env(continuous: bool = False, max_steps: int = EPISODE_STEPS, pixels: bool = True) -> gym.Env:
    """CarRacing-v3 with the given action space, ending after max_steps steps."""
    if pixels:
        return gym.make(ENV_ID, continuous=continuous, max_episode_steps=max_steps)
    return TimeLimit(_NoPixelsCarRacing(continuous=continuous), max_episode_steps=max_steps)


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


STATE_FIELDS = ("x", "y", "angle", "speed", "wheel_angle", "progress")
SKIP_GAP = 20  # skipped_tiles: a run of untouched tiles this long or longer ends the car's progress


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
