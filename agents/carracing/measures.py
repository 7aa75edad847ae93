"""Where the car is on its track: wheels off the road (and a wrapper that ends an episode there), tiles driven past,
the sharpest bend of a track and the seeds whose tracks have one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from nac.config import ConfigError
from agents.carracing.env import make_env


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


BEND_SEGMENTS = 12  # sharpest_bend: a bend is the heading change over this many track segments (about 42 units)


def sharpest_bend(env: gym.Env) -> float:
    """The track's sharpest bend: the largest change of its heading (degrees) over BEND_SEGMENTS consecutive segments,
    around the closed loop. About one track in six turns 150 degrees or more (a hairpin), where the discrete policies
    lose their tracks (docs/studies/quickstart-discrete-rounds/, 'What the lost tracks have in common')."""
    beta = np.array([t[1] for t in env.unwrapped.track])  # the road's direction angle at each point
    turn = (np.roll(beta, -1) - beta + np.pi) % (2 * np.pi) - np.pi  # (N,) each segment's heading change
    window = np.convolve(np.concatenate([turn, turn[: BEND_SEGMENTS - 1]]), np.ones(BEND_SEGMENTS), "valid")
    return float(np.degrees(np.abs(window).max()))


def track_bends(seeds: list[int]) -> dict[int, float]:
    """{seed: its track's sharpest bend (degrees)}, for reports that ask which tracks are hairpins."""
    env = make_env(pixels=False)
    try:
        bends = {}
        for seed in seeds:
            env.reset(seed=seed)
            bends[seed] = sharpest_bend(env)
        return bends
    finally:
        env.close()


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
