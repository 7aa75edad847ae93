"""CarRacing's 96 x 96 observation drawn directly, at a small multiple of its size.

gymnasium draws every observation on a 1000 x 800 window (road, car, then the instrument strip
and the score in text), flips it and smooth-scales it down to 96 x 96. Most of a step's time goes
there: ~80 anti-aliased polygons filled at 800 000 pixels, a full-window flip, the font looked
up and the score rendered anew, and the smooth-scale of the whole window. This draws the same
scene above the instrument strip, in the same order and colours, on a (96 k) x (84 k) surface
(k = SCALE) whose axes are the window's scaled (x by 96 k / 1000, y by 96 k / 800, the flip folded
into the y mapping) and area-averages it by k. It fills each polygon without the anti-aliased
outline gymnasium draws around it: at k >= 3 the area average smooths the edges, and the outline,
a pixel wide on every side, only widened each polygon (the frames are closer to gymnasium's without
it, and a third faster). The instrument strip is the only part drawn at the window's own resolution (1000 x 100
pixels, with gymnasium's own rounding of its bars and the same cached score text) and
smooth-scaled to the frame's last 12 rows exactly as gymnasium scales it, because policies read
the speed bar (agents.carracing.wheel.frame_speed). Written here: gymnasium offers no other renderer, and no
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
    cos, sin = math.cos(angle), math.sin(angle)
    m00, m01, m10, m11 = fx * zoom * cos, -fx * zoom * sin, -fy * zoom * sin, -fy * zoom * cos
    x, y = car.hull.position
    m = np.array([[m00, m01], [m10, m11]])
    b = np.array([fx * cr.WINDOW_W / 2 - (m00 * x + m01 * y), fy * cr.WINDOW_H * 3 / 4 - (m10 * x + m11 * y)])
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
        self.small = pygame.Surface((FRAME, FRAME - STRIP_ROWS))  # the scene scaled down
        self.fx = side / cr.WINDOW_W  # surface pixels per window pixel, across
        self.fy = side / cr.WINDOW_H  # and down
        self._shapes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list] | None = None
        self._track: object = None
        self._car: object = None
        self._parts: list[tuple[int, list[tuple[float, float]], list[int]]] = []

    # -- the scene ---------------------------------------------------------------------------
    def _road_shapes(self, env: cr.CarRacing) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list]:
        """road_polygons(env), with each polygon's centre (x (N,), y (N,)) and the distance (N,) from it to its
        farthest vertex (which polygons may show)."""
        if self._shapes is None or self._track is not env.road_poly:
            verts, colours = road_polygons(env)
            centre = verts.mean(axis=1)
            radius = np.linalg.norm(verts - centre[:, None], axis=2).max(axis=1)
            self._shapes = (verts, centre[:, 0].copy(), centre[:, 1].copy(), radius, colours)
            self._track = env.road_poly
        return self._shapes

    def _car_parts(self, car: car_dynamics.Car) -> list[tuple[int, list[tuple[float, float]], list[int]]]:
        """Every polygon car_dynamics draws of the car (the wheels, one each, then the hull's): its body's
        index in car.drawlist, its vertices in that body's frame, its colour. Box2D's shapes do not
        change, so this is read once per car."""
        if self._car is not car:
            self._parts = [(j, [tuple(v) for v in f.shape.vertices], [int(c * 255) for c in body.color])
                           for j, body in enumerate(car.drawlist) for f in body.fixtures]
            self._car = car
        return self._parts

    def _draw_car(self, car: car_dynamics.Car, m: np.ndarray, b: np.ndarray) -> None:
        """car_dynamics.Car.draw without its particles, each body's pose and the view folded into one
        affine map (p = A v + t). In floats, not numpy: a car is ~40 vertices, and numpy's per-call cost was
        a sixth of a frame."""
        (m00, m01), (m10, m11) = m.tolist()
        bx, by = b.tolist()
        maps = []
        for body in car.drawlist:
            (x, y), cs, sn = body.position, math.cos(body.angle), math.sin(body.angle)
            maps.append((m00 * cs + m01 * sn, m01 * cs - m00 * sn, m10 * cs + m11 * sn, m11 * cs - m10 * sn,
                         m00 * x + m01 * y + bx, m10 * x + m11 * y + by))
        wheels = len(car.wheels)  # the first bodies of car.drawlist, one polygon each
        for j, verts, colour in self._car_parts(car):
            a, c, d, e, tx, ty = maps[j]
            pygame.draw.polygon(self.surf, colour, [(a * u + c * v + tx, d * u + e * v + ty) for u, v in verts])
            stripe = _wheel_stripe(car.wheels[j].phase) if j < wheels else None  # a wheel's lighter stripe, over it
            if stripe is not None:
                pygame.draw.polygon(self.surf, car_dynamics.WHEEL_WHITE, [(a * u + c * v + tx, d * u + e * v + ty) for u, v in stripe])

    def _fill_background(self, env: cr.CarRacing, m: np.ndarray, b: np.ndarray) -> None:
        """The playfield's colour, and black beyond it (seen while the opening zoom is wide, or near
        the playfield's edge), as gymnasium's first polygon draws them."""
        surf, lim = self.surf, cr.PLAYFIELD
        w, h = surf.get_size()
        bg = [int(c) for c in env.bg_color]
        (m00, m01), (m10, m11) = m.tolist()
        bx, by = b.tolist()
        det = m00 * m11 - m01 * m10
        corners = [((m11 * (x - bx) - m01 * (y - by)) / det, (m00 * (y - by) - m10 * (x - bx)) / det)  # the view's corners in the world
                   for x, y in ((0, 0), (w, 0), (0, h), (w, h))]
        if all(abs(x) <= lim and abs(y) <= lim for x, y in corners):  # the playfield fills the view (the usual case)
            surf.fill(bg)
            return
        surf.fill((0, 0, 0))
        field = (np.array([(lim, lim), (lim, -lim), (-lim, -lim), (-lim, lim)]) @ m.T + b).tolist()  # (4, 2)
        gfxdraw.filled_polygon(surf, field, bg)

    def frame(self, env: cr.CarRacing) -> np.ndarray:
        """The observation of env's present state: (96, 96, 3) uint8."""
        surf = self.surf
        m, b = view(env, self.fx, self.fy)
        scenario = getattr(env, "scenario", None)
        w, h = surf.get_size()
        noise = scenario.background(w, h, m, b) if scenario is not None else None
        if noise is None:
            self._fill_background(env, m, b)
        else:
            blit_array(surf, noise)

        verts, cx, cy, radius, colours = self._road_shapes(env)
        (m00, m01), (m10, m11) = m.tolist()
        reach = radius * max(abs(m00) + abs(m01), abs(m10) + abs(m11)) + 1  # (N,) how far its vertices may lie from its centre, in pixels
        x, y = b.tolist()
        x, y = cx * m00 + cy * m01 + (x - w / 2), cx * m10 + cy * m11 + (y - h / 2)  # (N,) each centre on the surface, from the surface's centre
        seen = np.flatnonzero((np.abs(x) <= reach + w / 2) & (np.abs(y) <= reach + h / 2))
        pix = (verts[seen] @ m.T + b).tolist()  # (n, 4, 2) surface pixels of those that may show
        grass = [int(v) for v in env.grass_color]
        squares = scenario is None or scenario.grass_squares
        for i, poly in zip(seen.tolist(), pix):
            if colours[i] is None and not squares:
                continue
            colour = grass if colours[i] is None else [int(v) for v in colours[i]]
            gfxdraw.filled_polygon(surf, poly, colour)  # no anti-aliased outline (the module's docstring)

        self._draw_car(env.car, m, b)
        draw_scenario(surf, env, m, b, surf.get_height())
        scene = _pixels(pygame.transform.smoothscale(surf, (FRAME, FRAME - STRIP_ROWS), self.small))  # an area average over k x k pixels
        return np.concatenate([scene, self._strip(env)])  # (96, 96, 3)

    # -- the instrument strip ----------------------------------------------------------------
    @staticmethod
    def _strip(env: cr.CarRacing) -> np.ndarray:
        """The frame's last 12 rows: gymnasium's _render_indicators and score, drawn on the window's
        last 100 rows at its resolution and smooth-scaled as the whole window is (700/800 of the
        window is exactly 84/96 of the frame, so the strip's rows map onto the frame's last 12).

        Each part (the score, the speed bar, the four ABS bars, the steering bar, the gyro bar) is
        drawn and scaled alone once per look and kept (_look): smooth-scaling is a filter over
        neighbouring window columns, so where no two parts share a frame column the strip is its
        parts' columns side by side, bit for bit. A part takes one of a few hundred looks in an
        episode; where two parts do share a column (a wide spin's gyro bar reaching the steering
        bar), the strip is drawn whole."""
        parts = strip_parts(env)
        spans = [_columns(first, last) for _, first, last in parts]
        bounds = sorted(spans)
        if any(a[1] >= b[0] for a, b in zip(bounds, bounds[1:])):
            return draw_strip([key for key, _, _ in parts])
        out = np.zeros((STRIP_ROWS, FRAME, 3), np.uint8)
        for (key, _, _), (lo, hi) in zip(parts, spans):
            out[:, lo:hi + 1] = _look(key, lo, hi)
        return out


SCORE_CENTRE = (60, cr.WINDOW_H * 5 // 40 - cr.WINDOW_H * 2.5 / 40.0)  # where gymnasium centres the score, in the strip


def draw_strip(keys: list[tuple], columns: int = FRAME) -> np.ndarray:
    """The instrument strip with the parts `keys` (strip_parts) drawn on black, at the window's
    resolution, smooth-scaled to the frame's last rows: (12, columns, 3) uint8, the frame's first
    `columns` columns (a multiple of BLOCK[1]: the scaling is a filter that runs from the left, and
    BLOCK[0] window columns make exactly BLOCK[1] frame columns, so the columns are the same as of
    the whole strip's)."""
    strip = _strip_surface()
    strip.fill((0, 0, 0))
    for kind, what in keys:
        if kind == "text":
            strip.blit(*_score(what))
        else:
            for colour, rect in what:
                strip.fill(colour, rect)
    width = columns * BLOCK[0] // BLOCK[1]
    return _pixels(pygame.transform.smoothscale(strip.subsurface((0, 0, width, STRIP_H)), (columns, STRIP_ROWS)))


BLOCK = (125, 12)  # window columns, and the frame columns they scale to exactly (1000 / 96 = 125 / 12)


@lru_cache(maxsize=1)
def _strip_surface() -> pygame.Surface:
    return pygame.Surface((cr.WINDOW_W, STRIP_H))


@lru_cache(maxsize=4096)
def _look(key: tuple, lo: int, hi: int) -> np.ndarray:
    """Frame columns lo..hi of the strip with only the part `key` drawn: kept, as the score's text is,
    because a part takes a few hundred looks in an episode; drawn only as far as column hi needs."""
    columns = -(-(hi + 1) // BLOCK[1]) * BLOCK[1]
    return draw_strip([key], columns)[:, lo:hi + 1].copy()


def strip_parts(env: cr.CarRacing) -> list[tuple[tuple, int, int]]:
    """What gymnasium's _render_indicators and score draw, as parts (key, first window column, last):
    key ("text", the score) or ("fill", ((colour, (x, y, w, h)), ...)), rectangles on the strip's
    surface. The four ABS bars touch one another, so they are one part."""
    car = env.car
    v = car.hull.linearVelocity
    speed = math.sqrt(v[0] * v[0] + v[1] * v[1])
    wheels = [r for i, colour in ((0, (0, 0, 255)), (1, (0, 0, 255)), (2, (51, 0, 255)), (3, (51, 0, 255)))  # the wheels' ABS
              for r in _vertical(car.wheels[i].omega, 7 + i, 0.01 * car.wheels[i].omega, colour)]
    steer, spin = car.wheels[0].joint.angle, car.hull.angularVelocity
    bars = [_vertical(speed, 5, 0.02 * speed, (255, 255, 255)), wheels,
            _horizontal(steer, 20, -10.0 * steer, (0, 255, 0)), _horizontal(spin, 30, -0.8 * spin, (255, 0, 0))]
    parts = [(("fill", tuple(rects)), min(r[0] for _, r in rects), max(r[0] + r[2] - 1 for _, r in rects)) for rects in bars if rects]
    text = f"{env.reward:04.0f}"
    rect = _score(text)[1]
    return [(("text", text), rect.left, rect.right - 1)] + parts


def _score(text: str) -> tuple[pygame.Surface, pygame.Rect]:
    """The score's rendered text and where gymnasium places it on the strip."""
    surface = _score_text(text)
    rect = surface.get_rect()
    rect.center = SCORE_CENTRE
    return surface, rect


_S, _H, _TOP = cr.WINDOW_W / 40.0, cr.WINDOW_H / 40.0, cr.WINDOW_H - STRIP_H  # gymnasium's indicator units, and the strip's top row


def _bar(value: float, x0: float, x1: float, y0: float, y1: float, colour: tuple[int, int, int]) -> list:
    # gymnasium draws each bar as a polygon; on an axis-aligned rectangle pygame fills the pixels from
    # the floor of its low corner to the floor of its high one, inclusive: the same pixels, faster
    if abs(value) <= 1e-4:
        return []
    (a, b), (c, d) = sorted((math.floor(x0), math.floor(x1))), sorted((math.floor(y0 - _TOP), math.floor(y1 - _TOP)))
    return [(colour, (a, c, b - a + 1, d - c + 1))]


def _vertical(value: float, place: float, val: float, colour: tuple[int, int, int]) -> list:
    H, h = cr.WINDOW_H, _H
    return _bar(value, place * _S, (place + 1) * _S, H - (h + h * val), H - h, colour)


def _horizontal(value: float, place: float, val: float, colour: tuple[int, int, int]) -> list:
    H, h = cr.WINDOW_H, _H
    return _bar(value, place * _S, (place + val) * _S, H - 4 * h, H - 2 * h, colour)


def _columns(first: int, last: int) -> tuple[int, int]:
    """The frame columns smooth-scaling carries window columns first..last into (by a hair more on each
    side: the filter's fixed-point steps drift by a thousandth of a pixel)."""
    step = FRAME / cr.WINDOW_W
    return max(math.floor(first * step - 0.01), 0), min(math.floor((last + 1) * step + 0.01), FRAME - 1)


def _pixels(surf: pygame.Surface) -> np.ndarray:
    """A surface's pixels as a writable (H, W, 3) uint8 array (tobytes: a third of surfarray's time)."""
    w, h = surf.get_size()
    return np.frombuffer(bytearray(pygame.image.tobytes(surf, "RGB")), np.uint8).reshape(h, w, 3)


def _wheel_stripe(phase: float) -> list[tuple[float, float]] | None:
    """The lighter stripe car_dynamics draws on a wheel to show it turning, in the wheel's frame
    (None when it is on the far side)."""
    a1, a2 = phase, phase + 1.2
    s1, s2, c1, c2 = math.sin(a1), math.sin(a2), math.cos(a1), math.cos(a2)
    if s1 > 0 and s2 > 0:
        return None
    if s1 > 0:
        c1 = float((c1 > 0) - (c1 < 0))  # np.sign, as car_dynamics
    if s2 > 0:
        c2 = float((c2 > 0) - (c2 < 0))
    w, r, k = car_dynamics.WHEEL_W, car_dynamics.WHEEL_R, car_dynamics.SIZE
    return [(-w * k, r * c1 * k), (w * k, r * c1 * k), (w * k, r * c2 * k), (-w * k, r * c2 * k)]
