"""CarRacing-v3 from gymnasium, drawn fast: the environment every job drives, its action spaces and renderers; the car's
state is in agents.carracing.state, its wheels in agents.carracing.wheel, measures of its track in agents.carracing.measures."""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pygame
from gymnasium.envs.box2d import car_racing
from gymnasium.envs.box2d.car_racing import CarRacing
from gymnasium.wrappers import TimeLimit
from pygame import gfxdraw

from agents.carracing.render import DirectRenderer, blit_array, draw_scenario, road_polygons, view
from agents.carracing.scenarios import CLEAN, Scenario
from nac.config import need

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
# --discrete for CarRacing's 5 discrete actions; --continuous, the switch before continuous was the default, still says it
CONTINUOUS = {"negated": "discrete", "negated_help": "5 discrete actions (noop, right, left, gas, brake) instead of continuous "
              "(steer, gas, brake)", "explicit_help": "continuous (steer, gas, brake) actions: the default, said explicitly"}
# Discrete actions of CarRacing-v3 (note: 1 steers RIGHT, 2 LEFT; gas is only 0.2).
ACTIONS = ("noop", "right", "left", "gas", "brake")


# The speed bar of CarRacing's instrument panel (car_racing._render_indicators): a white bar from
# x = 125 to 150 and up from y = 780 by 0.4 px per u/s of the car's speed, drawn on the 1000 x 800
# window that smoothscale shrinks to the 96 x 96 frame: columns 12 and 13 hold it whole, at 0.048 rows
# per u/s; the black panel below the track starts at row 84.


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
        else:  # noise or photos, drawn as the window shows it, and this surface is flipped after
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


