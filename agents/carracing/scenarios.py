"""Scenarios: the field's generalization tests for CarRacing, as options of the environment.

A policy trained on clean frames is driven, without retraining, in a CarRacing whose pictures
differ (the physics, the track and the reward never do). The variants are those of Tang, Nguyen
and Ha, "Neuroevolution of Self-Interpretable Agents" (GECCO 2020; their CarRacingExtension), on
gymnasium's CarRacing-v3, and gymnasium's own domain randomisation:

- `color`: at reset two scalars drawn uniformly from [-0.2, 0.2] (colours on a 0..1 scale), one
  added to every channel of the road's colour, one to the grass's (the background); the lighter
  grass squares keep theirs.
- `color3`: the same with one draw per channel (two 3-vectors).
- `bar`: two black vertical bars, each 3/40 of the window's width, at its left and right edges,
  from the top of the instrument strip to the top of the frame.
- `blob`: a red (0.8, 0, 0) square of 8 x 8 world units fixed in the car's frame: its corner 20
  units right of and 10 ahead of the first vertex of the hull's rear fixture (on the car's right,
  mostly off the road).
- `noise`: the grass (background and squares) replaced by uniform RGB noise, one value per world
  unit, drawn afresh every frame; road and kerbs unchanged.
- `photos`: the grass (background and squares) replaced by photographs, as AttentionNeuron tests it (Tang & Ha
  2021, natural images behind the road): the playfield tiled with PHOTO_TILE x PHOTO_TILE world units per photograph,
  one pixel per world unit, each tile one of PHOTOS (colour photographs that ship inside scikit-image's wheel, read
  from it: nothing is downloaded) drawn at reset; road and kerbs unchanged.
- `domain-randomize`: gymnasium's `domain_randomize=True` (road and background colours drawn from
  0..210 per channel at every reset, the grass the background with one channel raised by 20). It
  draws its colours from the track's generator before the track, so its tracks differ from the
  clean ones of the same seed; the other scenarios keep the clean track of every seed.

Every random draw comes from the episode's seed (and the scenario's name), so that every policy
meets the very same variant of every track. Both renderers (agents.carracing.render) draw every scenario.
Written here: no library ships these variants for gymnasium's CarRacing-v3.
"""

from __future__ import annotations

import zlib
from functools import cache

import cv2
import numpy as np
from gymnasium.envs.box2d import car_racing as cr

from nac.config import need

CLEAN = "clean"
SCENARIOS = (CLEAN, "color", "color3", "bar", "blob", "noise", "photos", "domain-randomize")
ROAD = np.array([102.0, 102.0, 102.0])  # CarRacing-v3's road colour (0.4 of 255 per channel)
BACKGROUND = np.array([102.0, 204.0, 102.0])  # its grass (background) colour; the lighter squares are grass_color
COLOR_SHIFT = 0.2  # color, color3: the largest shift of a colour, on the 0..1 scale
BAR_WIDTH = 3 / 40  # bar: each bar's width, a share of the window's (75 of gymnasium's 1000 pixels)
BLOB_COLOUR = (204, 0, 0)  # blob: (0.8, 0, 0)
BLOB_OFFSET = (20.0, 10.0)  # blob: its corner from the rear hull fixture's first vertex, world units (right, ahead)
BLOB_SIZE = 8.0  # blob: its side, world units
REAR_FIXTURE = 3  # blob: the hull fixture it is placed from (car_dynamics' HULL_POLY4, the rear bumper)
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field")  # photos: skimage.data's colour photographs
PHOTO_TILE = 192  # photos: a tile's side in world units (the camera's view spans about 40 of them)


# Published scores on the variants (mean, std over 100 episodes), of agents trained on clean CarRacing-v0 and tested
# without retraining (Tang et al. 2020, their CarRacing table): measured on gym's CarRacing-v0, whose physics and
# renderer differ in details from gymnasium's CarRacing-v3, so a comparison says so.
PUBLISHED_ON = "CarRacing-v0"
PUBLISHED = {
    "AttentionAgent": {CLEAN: (914, 15), "color": (866, 112), "color3": (673, 372), "bar": (900, 35), "blob": (898, 53), "noise": (-58, 12)},
    "World Models": {CLEAN: (901, 37), "color": (655, 353), "color3": (394, 413), "bar": (166, 137), "blob": (446, 299)},
    "PPO": {CLEAN: (865, 159), "color": (505, 464), "color3": (579, 444), "bar": (615, 217), "blob": (855, 172)},
    "GA world models": {CLEAN: (859, 79), "color": (442, 362), "color3": (160, 304), "bar": (675, 254), "blob": (833, 135)},
}


def check_scenario(name: str) -> None:
    need(name in SCENARIOS, f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")


@cache
def photo(name: str) -> np.ndarray:
    """One of PHOTOS as a (PHOTO_TILE, PHOTO_TILE, 3) uint8 picture (scikit-image reads it from its own wheel)."""
    import skimage.data  # a photos scenario's dependency alone: imported when one is drawn

    image = getattr(skimage.data, name)()
    return cv2.resize(np.ascontiguousarray(image[..., :3]), (PHOTO_TILE, PHOTO_TILE), interpolation=cv2.INTER_AREA)


class Scenario:
    """One env's scenario: its random draws, from the seed of each reset."""

    def __init__(self, name: str = CLEAN) -> None:
        check_scenario(name)
        self.name = name
        self.rng = np.random.default_rng(0)

    def reset(self, env: cr.CarRacing, seed: int | None) -> None:
        """Before CarRacing's reset builds the track (whose tiles take the road's colour): the
        colours of color and color3. A reset without a seed continues the last seed's draws."""
        if seed is not None:
            self.rng = np.random.default_rng([seed, zlib.crc32(self.name.encode())])
        if self.name in ("color", "color3"):
            shape = (2,) if self.name == "color" else (2, 3)
            road, grass = self.rng.uniform(-COLOR_SHIFT, COLOR_SHIFT, shape) * 255
            env.road_color = np.clip(ROAD + road, 0, 255)
            env.bg_color = np.clip(BACKGROUND + grass, 0, 255)
        if self.name == "photos" and (seed is not None or getattr(self, "mosaic", None) is None):
            n = int(np.ceil(2 * cr.PLAYFIELD / PHOTO_TILE))  # tiles a side
            drawn = self.rng.integers(0, len(PHOTOS), (n, n))
            self.mosaic = np.concatenate([np.concatenate([photo(PHOTOS[k]) for k in row], axis=1) for row in drawn], axis=0)

    @property
    def draws_over(self) -> bool:
        """Whether something is drawn over the scene (the blob, the bars)."""
        return self.name in ("bar", "blob")

    @property
    def grass_squares(self) -> bool:
        """Whether the lighter grass squares are drawn (not under noise or photos, which replace all the grass)."""
        return self.name not in ("noise", "photos")

    def background(self, width: int, height: int, m: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        """noise, photos: a (height, width, 3) uint8 picture of the playfield in view, one colour per world unit (noise:
        drawn afresh; photos: the reset's mosaic), black beyond the playfield, for a surface whose pixels are world points
        mapped by p = m @ w + b; None for the other scenarios (the grass colour)."""
        if self.name not in ("noise", "photos"):
            return None
        lim = cr.PLAYFIELD
        corners = (np.array([[0, 0], [width, 0], [0, height], [width, height]], dtype=np.float64) - b) @ np.linalg.inv(m).T
        lo = np.clip(np.floor(corners.min(axis=0)), -lim, lim)
        hi = np.clip(np.ceil(corners.max(axis=0)), -lim, lim)
        nx, ny = int(hi[0] - lo[0]), int(hi[1] - lo[1])
        if nx <= 0 or ny <= 0:
            return np.zeros((height, width, 3), np.uint8)
        if self.name == "noise":
            cells = self.rng.integers(0, 256, (ny, nx, 3), dtype=np.uint8)  # cell (row j, column i) is world [lo + (i, j), lo + (i, j) + 1)
        else:  # the mosaic's row j, column i is world [-lim + (i, j), -lim + (i, j) + 1)
            i0, j0 = int(lo[0] + lim), int(lo[1] + lim)
            cells = np.ascontiguousarray(self.mosaic[j0:j0 + ny, i0:i0 + nx])
        to_surface = np.hstack([m, (m @ (lo + 0.5) + b)[:, None]])  # a cell's centre (i, j) -> surface pixel
        return cv2.warpAffine(cells, to_surface, (width, height), flags=cv2.INTER_NEAREST,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))

    def blob(self, env: cr.CarRacing) -> np.ndarray | None:
        """blob: its square's (4, 2) world vertices; None for the other scenarios."""
        if self.name != "blob":
            return None
        hull = env.car.hull
        x0, y0 = np.array(hull.fixtures[REAR_FIXTURE].shape.vertices[0]) + BLOB_OFFSET
        s = BLOB_SIZE
        return np.array([tuple(hull.transform * (x, y)) for x, y in ((x0, y0 + s), (x0 + s, y0 + s), (x0 + s, y0), (x0, y0))])

    def bars(self, width: int) -> list[tuple[int, int]] | None:
        """bar: the (first column, width) of each bar on a surface `width` pixels across that spans
        the window's width; None for the other scenarios."""
        if self.name != "bar":
            return None
        w = round(BAR_WIDTH * width)
        return [(0, w), (width - w, w)]
