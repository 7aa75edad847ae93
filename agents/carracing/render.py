"""CarRacing's 96 x 96 observation drawn directly, at a small multiple of its size.

gymnasium draws every observation on a 1000 x 800 window (road, car, then the instrument strip
and the score in text), flips it and smooth-scales it down to 96 x 96. Most of a step's time goes
there: ~80 anti-aliased polygons filled at 800 000 pixels, a full-window flip, the font looked
up and the score rendered anew, and the smooth-scale of the whole window. This draws the same
scene above the instrument strip, in the same order and colours, on a (96 k) x (84 k) surface
(k = SCALE) whose axes are the window's scaled (x by 96 k / 1000, y by 96 k / 800, the flip folded
into the y mapping) and area-averages it by k. The instrument strip is the only part drawn at the window's own resolution (1000 x 100
pixels, with gymnasium's own rounding of its bars and the same cached score text) and
smooth-scaled to the frame's last 12 rows exactly as gymnasium scales it, because policies read
the speed bar (agents.carracing.env.frame_speed). Written here: gymnasium offers no other renderer, and no
library draws CarRacing's scene.

The frames are not bit-identical to gymnasium's (polygon edges are rasterised on a coarser grid);
how far they differ is measured by `nacdrive bench env`, and whether policies trained on
gymnasium's frames notice in docs/studies/simulator-speed.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pygame
from gymnasium.envs.box2d import car_dynamics
from gymnasium.envs.box2d import car_racing as cr
from pygame import gfxdraw

from agents.carracing.scenarios import BLOB_COLOUR

FRAME = 96  # CarRacing's observation is FRAME x FRAME x 3 (car_racing.STATE_W, STATE_H)
STRIP_ROWS = 12  # the instrument strip: the window's last 5/40 of its height, rows 84..95 of the frame
STRIP_H = cr.WINDOW_H * 5 // 40  # 100 window rows
SCALE = 6  # the default: the shipped policies, trained on gymnasium's frames, noticed frames drawn at 3 and not at 6
# (docs/studies/simulator-speed)
SCALES = (3, 5, 6)  # the multiples k a frame may be drawn at: those at which
# pygame's smooth-scale maps a flat colour as it does from gymnasium's window (2 levels darker; at k = 2, 4, 8 it keeps them)


def road_polygons(env: cr.CarRacing) -> tuple[np.ndarray, list]:
    """Every polygon gymnasium's _render_road draws after the background, in its order (the grass
    squares, then the road tiles): (N, 4, 2) world vertices, and each one's colour (None: the grass
    colour; the road tiles' colour arrays are CarRacing's own, which it changes in place when a tile
    is first touched, so they are read at each frame)."""
    g = cr.GRASS_DIM
    grass = [[(g * x + g, g * y), (g * x, g * y), (g * x, g * y + g), (g * x + g, g * y + g)]
             for x in range(-20, 20, 2) for y in range(-20, 20, 2)]
    road = [[(p[0], p[1]) for p in poly] for poly, _ in env.road_poly]
    return np.array(grass + road, dtype=np.float64), [None] * len(grass) + [c for _, c in env.road_poly]


def view(env: cr.CarRacing, fx: float = 1.0, fy: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The affine map world -> pixels of gymnasium's window after its flip, (M (2, 2), b (2,)), scaled by
    (fx, fy) to another surface: as gymnasium places the scene, rotated against the car's heading,
    zoomed (with its opening zoom animation), the car at (W/2, H/4) of the window before the flip."""
    car = env.car
    angle = -car.hull.angle
    zoom = 0.1 * cr.SCALE * max(1 - env.t, 0) + cr.ZOOM * cr.SCALE * min(env.t, 1)
    cos, sin = np.cos(angle), np.sin(angle)
    m = np.array([[fx * zoom * cos, -fx * zoom * sin],
                  [-fy * zoom * sin, -fy * zoom * cos]])
    centre = np.array(car.hull.position, dtype=np.float64)
    b = np.array([fx * cr.WINDOW_W / 2, fy * cr.WINDOW_H * 3 / 4]) - m @ centre
    return m, b


def draw_scenario(surf: pygame.Surface, env: cr.CarRacing, m: np.ndarray, b: np.ndarray, scene_rows: int) -> None:
    """What a scenario (agents.carracing.scenarios) draws over the scene: the blob and the bars, on a surface
    whose first `scene_rows` rows are the window's above its instrument strip, world points mapped
    by p = m @ w + b (view)."""
    scenario = getattr(env, "scenario", None)
    if scenario is None or not scenario.draws_over:
        return
    blob = scenario.blob(env)
    if blob is not None:
        pygame.draw.polygon(surf, BLOB_COLOUR, (blob @ m.T + b).tolist())
    for x, w in scenario.bars(surf.get_width()) or ():
        surf.fill((0, 0, 0), (x, 0, w, scene_rows))


def blit_array(surf: pygame.Surface, pixels: np.ndarray) -> None:
    """A (height, width, 3) uint8 array onto the whole surface."""
    h, w = pixels.shape[:2]
    surf.blit(pygame.image.frombuffer(np.ascontiguousarray(pixels).tobytes(), (w, h), "RGB"), (0, 0))


@lru_cache(maxsize=1)
def _font() -> pygame.font.Font:
    pygame.font.init()
    return pygame.font.Font(pygame.font.get_default_font(), 42)


@lru_cache(maxsize=4096)
def _score_text(text: str) -> pygame.Surface:
    """The score as gymnasium renders it (white on black, its default font at 42 px); cached because
    an episode shows a few hundred distinct scores and rendering text is a millisecond each."""
    return _font().render(text, True, (255, 255, 255), (0, 0, 0))


class DirectRenderer:
    """Draws a CarRacing env's observation from its state: `frame(env)` -> (96, 96, 3) uint8.

    scale: the multiple k of 96 the scene is drawn at before area-averaging (one of SCALES);
    larger is closer to gymnasium's frame and slower (docs/studies/simulator-speed)."""

    def __init__(self, scale: int = SCALE) -> None:
        if scale not in SCALES:
            raise ValueError(f"DirectRenderer: scale must be one of {', '.join(map(str, SCALES))} (got {scale})")
        self.scale = scale
        side = FRAME * scale
        # the scene above the instrument strip (which is drawn apart): (96 k) x (84 k) pixels
        self.surf = pygame.Surface((side, (FRAME - STRIP_ROWS) * scale))
        self.strip = pygame.Surface((cr.WINDOW_W, STRIP_H))
        self.fx = side / cr.WINDOW_W  # surface pixels per window pixel, across
        self.fy = side / cr.WINDOW_H  # and down
        self._shapes: tuple[np.ndarray, np.ndarray, np.ndarray, list] | None = None
        self._track: object = None
        self._car: object = None
        self._parts: tuple[np.ndarray, np.ndarray, list[int], list[list[int]]] | None = None

    # -- the scene ---------------------------------------------------------------------------
    def _road_shapes(self, env: cr.CarRacing) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        """road_polygons(env), with each polygon's centre (N, 2) and the distance (N,) from it to its
        farthest vertex (which polygons may show)."""
        if self._shapes is None or self._track is not env.road_poly:
            verts, colours = road_polygons(env)
            centre = verts.mean(axis=1)
            radius = np.linalg.norm(verts - centre[:, None], axis=2).max(axis=1)
            self._shapes = (verts, centre, radius, colours)
            self._track = env.road_poly
        return self._shapes

    def _car_parts(self, car: car_dynamics.Car) -> tuple[np.ndarray, np.ndarray, list[int], list[list[int]]]:
        """Every polygon car_dynamics draws of the car (the wheels, then the hull): their vertices in
        their body's frame (V, 2), each vertex's body (V,), where each polygon ends in them, and each
        one's colour. Box2D's shapes do not change, so this is read once per car."""
        if self._car is not car:
            local, body_of, ends, colours = [], [], [], []
            for j, body in enumerate(car.drawlist):
                for f in body.fixtures:
                    local += [tuple(v) for v in f.shape.vertices]
                    body_of += [j] * len(f.shape.vertices)
                    ends.append(len(local))
                    colours.append([int(c * 255) for c in body.color])
            self._parts = (np.array(local, dtype=np.float64), np.array(body_of), ends[:-1], colours)
            self._car = car
        return self._parts

    def _fill_background(self, env: cr.CarRacing, m: np.ndarray, b: np.ndarray) -> None:
        """The playfield's colour, and black beyond it (seen while the opening zoom is wide, or near
        the playfield's edge), as gymnasium's first polygon draws them."""
        surf, lim = self.surf, cr.PLAYFIELD
        w, h = surf.get_size()
        bg = [int(c) for c in env.bg_color]
        inv = np.linalg.inv(m)
        corners = (np.array([[0, 0], [w, 0], [0, h], [w, h]], dtype=np.float64) - b) @ inv.T  # (4, 2) world
        if np.abs(corners).max() <= lim:  # the playfield fills the view (the usual case)
            surf.fill(bg)
            return
        surf.fill((0, 0, 0))
        field = (np.array([(lim, lim), (lim, -lim), (-lim, -lim), (-lim, lim)]) @ m.T + b).tolist()  # (4, 2)
        gfxdraw.aapolygon(surf, field, bg)
        gfxdraw.filled_polygon(surf, field, bg)

    def frame(self, env: cr.CarRacing) -> np.ndarray:
        """The observation of env's present state: (96, 96, 3) uint8."""
        surf = self.surf
        size = np.array(surf.get_size(), dtype=np.float64)  # (width, height)
        m, b = view(env, self.fx, self.fy)
        scenario = getattr(env, "scenario", None)
        noise = scenario.background(*surf.get_size(), m, b) if scenario is not None else None
        if noise is None:
            self._fill_background(env, m, b)
        else:
            blit_array(surf, noise)

        verts, centre, radius, colours = self._road_shapes(env)
        c = centre @ m.T + b  # (N, 2) each polygon's centre on the surface
        reach = radius * np.abs(m).sum(axis=1).max() + 1  # (N,) how far its vertices may lie from it, in pixels
        seen = np.flatnonzero((np.abs(c - size / 2) <= size / 2 + reach[:, None]).all(axis=1))
        pix = (verts[seen] @ m.T + b).tolist()  # (n, 4, 2) surface pixels of those that may show
        grass = [int(v) for v in env.grass_color]
        squares = scenario is None or scenario.grass_squares
        for i, poly in zip(seen.tolist(), pix):
            if colours[i] is None and not squares:
                continue
            colour = grass if colours[i] is None else [int(v) for v in colours[i]]
            gfxdraw.aapolygon(surf, poly, colour)
            gfxdraw.filled_polygon(surf, poly, colour)

        # The car (car_dynamics.Car.draw without its particles): every vertex moved by its body's pose at once.
        car = env.car
        local, body_of, ends, part_colours = self._car_parts(car)
        pose = np.array([(*body.position, body.angle) for body in car.drawlist])  # (B, 3) x, y, angle
        cos, sin = np.cos(pose[:, 2])[body_of], np.sin(pose[:, 2])[body_of]  # (V,)
        world = np.stack([cos * local[:, 0] - sin * local[:, 1], sin * local[:, 0] + cos * local[:, 1]], axis=1) + pose[body_of, :2]
        polys = np.split(world @ m.T + b, ends)  # a (V_i, 2) array of surface pixels per polygon
        wheels = len(car.wheels)  # the first polygons, one each (car.drawlist = wheels + [hull])
        for k, (poly, colour) in enumerate(zip(polys, part_colours)):
            pygame.draw.polygon(surf, colour, poly.tolist())
            stripe = _wheel_stripe(car.wheels[k].phase) if k < wheels else None  # a wheel's lighter stripe, over it
            if stripe is not None:
                cw, sw = cos[ends[k] - 1], sin[ends[k] - 1]
                pts = np.stack([cw * stripe[:, 0] - sw * stripe[:, 1], sw * stripe[:, 0] + cw * stripe[:, 1]], axis=1) + pose[k, :2]
                pygame.draw.polygon(surf, car_dynamics.WHEEL_WHITE, (pts @ m.T + b).tolist())

        draw_scenario(surf, env, m, b, surf.get_height())
        scene = _pixels(pygame.transform.smoothscale(surf, (FRAME, FRAME - STRIP_ROWS)))  # an area average over k x k pixels
        return np.concatenate([scene, self._strip(env)])  # (96, 96, 3)

    # -- the instrument strip ----------------------------------------------------------------
    def _strip(self, env: cr.CarRacing) -> np.ndarray:
        """The frame's last 12 rows: gymnasium's _render_indicators and score, drawn on the window's
        last 100 rows at its resolution and smooth-scaled as the whole window is (700/800 of the
        window is exactly 84/96 of the frame, so the strip's rows map onto the frame's last 12)."""
        W, H = cr.WINDOW_W, cr.WINDOW_H
        s, h, top = W / 40.0, H / 40.0, H - STRIP_H
        strip = self.strip
        strip.fill((0, 0, 0))
        car = env.car

        def bar(value: float, x0: float, x1: float, y0: float, y1: float, colour: tuple[int, int, int]) -> None:
            # gymnasium draws each bar as a polygon; on an axis-aligned rectangle pygame fills the pixels from
            # the floor of its low corner to the floor of its high one, inclusive: the same pixels, faster
            if abs(value) > 1e-4:
                (a, b), (c, d) = sorted((math.floor(x0), math.floor(x1))), sorted((math.floor(y0 - top), math.floor(y1 - top)))
                strip.fill(colour, (a, c, b - a + 1, d - c + 1))

        def vertical(value: float, place: float, val: float, colour: tuple[int, int, int]) -> None:
            bar(value, place * s, (place + 1) * s, H - (h + h * val), H - h, colour)

        def horizontal(value: float, place: float, val: float, colour: tuple[int, int, int]) -> None:
            bar(value, place * s, (place + val) * s, H - 4 * h, H - 2 * h, colour)

        v = car.hull.linearVelocity
        speed = float(np.sqrt(np.square(v[0]) + np.square(v[1])))
        vertical(speed, 5, 0.02 * speed, (255, 255, 255))
        for i, colour in ((0, (0, 0, 255)), (1, (0, 0, 255)), (2, (51, 0, 255)), (3, (51, 0, 255))):  # the wheels' ABS
            omega = car.wheels[i].omega
            vertical(omega, 7 + i, 0.01 * omega, colour)
        steer = car.wheels[0].joint.angle
        horizontal(steer, 20, -10.0 * steer, (0, 255, 0))
        spin = car.hull.angularVelocity
        horizontal(spin, 30, -0.8 * spin, (255, 0, 0))

        text = _score_text(f"{env.reward:04.0f}")
        rect = text.get_rect()
        rect.center = (60, H - H * 2.5 / 40.0 - top)
        strip.blit(text, rect)
        return _pixels(pygame.transform.smoothscale(strip, (FRAME, STRIP_ROWS)))


def _pixels(surf: pygame.Surface) -> np.ndarray:
    """A surface's pixels as a writable (H, W, 3) uint8 array (tobytes: a third of surfarray's time)."""
    w, h = surf.get_size()
    return np.frombuffer(bytearray(pygame.image.tobytes(surf, "RGB")), np.uint8).reshape(h, w, 3)


def _wheel_stripe(phase: float) -> np.ndarray | None:
    """The lighter stripe car_dynamics draws on a wheel to show it turning, in the wheel's frame
    (None when it is on the far side)."""
    a1, a2 = phase, phase + 1.2
    s1, s2, c1, c2 = np.sin(a1), np.sin(a2), np.cos(a1), np.cos(a2)
    if s1 > 0 and s2 > 0:
        return None
    if s1 > 0:
        c1 = np.sign(c1)
    if s2 > 0:
        c2 = np.sign(c2)
    w, r, k = car_dynamics.WHEEL_W, car_dynamics.WHEEL_R, car_dynamics.SIZE
    return np.array([(-w * k, r * c1 * k), (w * k, r * c1 * k), (w * k, r * c2 * k), (-w * k, r * c2 * k)])
