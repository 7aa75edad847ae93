"""Evaluation videos: episodes driven by policies (or experts), each frame with an overlay panel.

Per driver a tile: the camera frame upscaled 4x with a Grad-CAM saliency heatmap blended on it
(captum's LayerGradCam through the CNN's last convolution), and a panel with the step, speed,
return so far, the chosen action and the action probabilities (or steer / gas / brake) as
bars, and for attention heads the frames of the window with the weight the last query gives
each. Two drivers (two runs, or a run and an expert) drive the same seed side by side in lockstep. H.264 (yuv420p) via
imageio-ffmpeg, which browsers play, at the environment's 50 frames per second.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
import torch
from matplotlib import colormaps
from PIL import Image, ImageDraw, ImageFont

from agents.carracing.env import ACTIONS, CONTINUOUS, EPISODE_STEPS, FPS, make_env
from agents.carracing.state import car_state
from agents.carracing.scenarios import CLEAN
from agents.carracing.seeds import VALIDATION_SEED
from agents.experts import EXPERTS, make_expert
from agents.driving.policy import DrivingPolicy
from agents.figures.saliency import saliency
from nac.config import at_least, check_ranges

SCALE = 4  # 96 px camera -> 384 px
CAM = 96 * SCALE
PANEL_W = 256
TILE_W = CAM + PANEL_W  # 640: a multiple of 16, as H.264 in yuv420p wants
HOLD_SECONDS = 2.0  # the final frame, with the final return, is held this long


# The heat map's colour and opacity per 8-bit level, looked up rather than evaluated per pixel
# (matplotlib maps a level k / 255 to entry k of its 256-entry jet table: the same colours; the blend in float32
# differs from float64 by at most 1 in 0.03 % of the pixels)
_HEAT_COLOUR = (colormaps["jet"](np.arange(256) / 255.0)[:, :3] * 255.0).astype(np.float32)
_HEAT_ALPHA = (0.45 * np.arange(256, dtype=np.float32) / 255.0)[:, None]


@functools.lru_cache(maxsize=None)
def _font(size: int) -> ImageFont.ImageFont:
    """PIL's default font at this size, loaded once (each load decodes the font anew: 18 texts a frame)."""
    return ImageFont.load_default(size=size)


@dataclass
class Driver:
    """One tile of the video: a name, what drives, and its own environment."""

    name: str
    policy: Any  # DrivingPolicy or an expert
    env: Any
    saliency: bool = True
    total: float = 0.0
    steps: int = 0
    done: bool = False
    last_tile: np.ndarray | None = None

    @property
    def learned(self) -> bool:
        return isinstance(self.policy, DrivingPolicy)


def overlay(driver: Driver, frame: np.ndarray, action: Any, speed: float, heat: np.ndarray | None, attention: np.ndarray | None,
            thumbs: list[np.ndarray] | None) -> np.ndarray:
    """The tile (CAM, TILE_W, 3) uint8 for one step."""
    cam = np.asarray(Image.fromarray(frame).resize((CAM, CAM), Image.NEAREST), dtype=np.float32)
    if heat is not None:
        big = np.asarray(Image.fromarray((heat * 255).astype(np.uint8)).resize((CAM, CAM), Image.BILINEAR))  # uint8 levels
        colour, alpha = _HEAT_COLOUR[big], _HEAT_ALPHA[big]  # alpha: stronger where the map is stronger; the road stays visible
        cam = cam * (1 - alpha) + colour * alpha
    tile = Image.new("RGB", (TILE_W, CAM), (18, 18, 22))
    tile.paste(Image.fromarray(cam.clip(0, 255).astype(np.uint8)), (0, 0))
    d = ImageDraw.Draw(tile)
    x0, y = CAM + 10, 8
    d.text((x0, y), driver.name[:30], font=_font(15), fill=(255, 255, 255))
    y += 22
    d.text((x0, y), f"step {driver.steps:4d}   speed {speed:5.1f}", font=_font(13), fill=(210, 210, 210))
    y += 18
    d.text((x0, y), f"return {driver.total:7.1f}", font=_font(13), fill=(210, 210, 210))
    y += 24
    y = _action_bars(d, x0, y, driver, action)
    if attention is not None and thumbs is not None:
        y = _attention_strip(tile, d, x0, y + 6, attention, thumbs)
    if driver.done:
        d.rectangle((0, CAM // 2 - 30, CAM, CAM // 2 + 30), fill=(0, 0, 0))
        d.text((20, CAM // 2 - 16), f"final return {driver.total:.1f}", font=_font(26), fill=(255, 230, 90))
    return np.asarray(tile)


def _bar(d: ImageDraw.ImageDraw, x: int, y: int, w: int, value: float, label: str, chosen: bool, centred: bool = False) -> None:
    d.text((x, y), label, font=_font(12), fill=(255, 230, 90) if chosen else (200, 200, 200))
    bx, bw = x + 52, w - 52
    d.rectangle((bx, y + 2, bx + bw, y + 12), outline=(90, 90, 90))
    if centred:  # steer: from the middle, left (negative) or right
        mid = bx + bw // 2
        end = mid + int(value * bw / 2)
        d.rectangle((min(mid, end), y + 3, max(mid, end), y + 11), fill=(120, 190, 255))
    else:
        d.rectangle((bx, y + 3, bx + int(np.clip(value, 0, 1) * bw), y + 11), fill=(255, 200, 80) if chosen else (120, 190, 255))


def _action_bars(d: ImageDraw.ImageDraw, x: int, y: int, driver: Driver, action: Any) -> int:
    w = PANEL_W - 20
    if np.ndim(action) == 0:  # discrete: probabilities (a learned policy) or the chosen action
        probs = driver.policy.last.get("probs") if driver.learned else None
        for i, name in enumerate(ACTIONS):
            p = float(probs[i]) if probs is not None else float(i == int(action))
            _bar(d, x, y, w, p, name, i == int(action))
            y += 16
    else:
        steer, gas, brake = (float(v) for v in action)
        _bar(d, x, y, w, steer, "steer", True, centred=True)
        _bar(d, x, y + 16, w, gas, "gas", True)
        _bar(d, x, y + 32, w, brake, "brake", True)
        y += 48
    return y


def _attention_strip(tile: Image.Image, d: ImageDraw.ImageDraw, x: int, y: int, attention: np.ndarray, thumbs: list[np.ndarray]) -> int:
    """attention (2, W): the effective weight of each frame (what the output multiplies its value
    by: NAC's softmax x t_ij) and the softmax alone; bars and numbers show the effective weight."""
    weights, soft = attention
    same = np.allclose(weights, soft)
    d.text((x, y), "attention weight of each frame" if same else "effective weight (softmax x t_ij)", font=_font(12), fill=(200, 200, 200))
    y += 16
    if not same:
        d.text((x, y), f"softmax alone: {soft.min():.2f}..{soft.max():.2f}", font=_font(10), fill=(160, 160, 160))
        y += 14
    n = len(thumbs)
    size = min(48, (PANEL_W - 20) // max(1, n) - 2)
    top = max(float(np.max(weights)), 1e-6)  # bars relative to the largest weight; labels exact
    for i, (thumb, w) in enumerate(zip(thumbs, weights)):
        tx = x + i * (size + 2)
        tile.paste(Image.fromarray(thumb).resize((size, size), Image.BILINEAR), (tx, y))
        h = int(np.clip(w / top, 0, 1) * 40)
        d.rectangle((tx, y + size + 44 - h, tx + size - 1, y + size + 44), fill=(255, 200, 80))
        d.text((tx, y + size + 46), f"{w:.2f}", font=_font(9), fill=(200, 200, 200))
    return y + size + 60


class _Frames:
    """The last `span` camera frames of a driver, to draw the window's thumbnails."""

    def __init__(self, span: int) -> None:
        self.frames: list[np.ndarray] = []
        self.span = span

    def push(self, frame: np.ndarray) -> None:
        self.frames = (self.frames + [frame])[-self.span :]


def _window_thumbs(policy: DrivingPolicy, frames: _Frames, first: np.ndarray) -> list[np.ndarray]:
    cfg, n = policy.cfg, len(frames.frames)
    out = []
    for k in range(cfg.window - 1, -1, -1):
        back = k * cfg.frame_stride
        out.append(frames.frames[n - 1 - back] if back < n else first)
    return out


def record(drivers: list[Driver], seed: int, writer: Any, max_steps: int) -> list[float]:
    """Drive every driver's episode on `seed` in lockstep, appending frames to the writer; the
    final returns. Finished drivers hold their last tile."""
    obs = {}
    for dr in drivers:
        obs[dr.name], _ = dr.env.reset(seed=seed)
        dr.policy.reset()
        dr.total, dr.steps, dr.done = 0.0, 0, False
    frames = {dr.name: _Frames(dr.policy.cfg.span if dr.learned else 1) for dr in drivers}
    firsts = {dr.name: obs[dr.name] for dr in drivers}
    while not all(dr.done for dr in drivers):
        tiles = []
        for dr in drivers:
            if dr.done:
                tiles.append(dr.last_tile)
                continue
            o = obs[dr.name]
            action = dr.policy.select_action(o)
            heat = attention = thumbs = None
            if dr.learned:
                frames[dr.name].push(o)
                if dr.saliency:
                    heat = saliency(dr.policy, o, action)
                if dr.policy.net.head.is_attention:
                    feats, times = dr.policy.window()
                    head, t_head = dr.policy.net.head, dr.policy.net.head_time(times)
                    with torch.no_grad():
                        eff = head.last_step_attention(feats, t_head, effective=True)
                        soft = head.last_step_attention(feats, t_head, effective=False)
                    attention = None if eff is None else np.stack([eff[0].cpu().numpy(), soft[0].cpu().numpy()])
                    thumbs = _window_thumbs(dr.policy, frames[dr.name], firsts[dr.name])
            speed = car_state(dr.env).speed
            tile = overlay(dr, o, action, speed, heat, attention, thumbs)
            obs[dr.name], reward, term, trunc, _ = dr.env.step(action)
            dr.total += float(reward)
            dr.steps += 1
            dr.done = bool(term or trunc) or dr.steps >= max_steps
            if dr.done:  # the last tile says how it ended
                tile = overlay(dr, o, action, speed, heat, attention, thumbs)
            dr.last_tile = tile
            tiles.append(tile)
        writer.append_data(np.concatenate(tiles, axis=1))
    final = np.concatenate([dr.last_tile for dr in drivers], axis=1)
    for _ in range(int(HOLD_SECONDS * FPS)):
        writer.append_data(final)
    return [dr.total for dr in drivers]


@dataclass
class RecordConfig:
    out: str  # the video file (.mp4)
    runs: list[str] = field(default_factory=list)  # run folders: one, or two driving the same seed side by side
    expert: str | None = field(default=None, metadata={"choices": EXPERTS})  # an expert to record, alone or beside a run
    continuous: bool = field(default=True, metadata=CONTINUOUS)  # the expert's action space when no run is given (runs bring their own)
    seed: int = VALIDATION_SEED  # the track's seed (the first held-out one by default)
    episodes: int = field(default=1, metadata=at_least(1))  # consecutive seeds, one after another in the same video
    max_steps: int = field(default=EPISODE_STEPS, metadata=at_least(1))  # steps per episode
    saliency: bool = True  # blend a Grad-CAM saliency map over the camera
    scenario: str = CLEAN  # what the frames show (agents.carracing.scenarios)

    def __post_init__(self) -> None:
        check_ranges(self)


def record_video(cfg: RecordConfig) -> dict[str, Any]:
    from nac.config import ConfigError

    if not cfg.runs and cfg.expert is None:
        raise ConfigError("give a run folder to record, or --expert track")
    if len(cfg.runs) + (cfg.expert is not None) > 2:
        raise ConfigError("a video shows one driver, or two side by side (two run folders, or a run and --expert)")
    if not cfg.out.endswith(".mp4"):
        raise ConfigError(f"--out must be an .mp4 file (got {cfg.out})")
    drivers = []
    for run in cfg.runs:
        policy = DrivingPolicy.from_run(run)
        drivers.append(Driver(Path(run).name, policy, make_env(policy.continuous, cfg.max_steps, scenario=cfg.scenario), cfg.saliency))
    if cfg.expert is not None:
        continuous = drivers[0].policy.continuous if drivers else cfg.continuous
        env = make_env(continuous, cfg.max_steps, scenario=cfg.scenario)
        drivers.append(Driver(f"expert: {cfg.expert}", make_expert(cfg.expert, env), env, False))
    if len({d.name for d in drivers}) < len(drivers):
        for i, d in enumerate(drivers):
            d.name = f"{i + 1}: {d.name}"
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    returns = []
    writer = imageio.get_writer(cfg.out, fps=FPS, codec="libx264", pixelformat="yuv420p", macro_block_size=16, ffmpeg_params=["-crf", "23"])
    try:
        for seed in range(cfg.seed, cfg.seed + cfg.episodes):
            returns.append({"seed": seed, **{d.name: r for d, r in zip(drivers, record(drivers, seed, writer, cfg.max_steps))}})
    finally:
        writer.close()
        for d in drivers:
            d.env.close()
    return {"video": cfg.out, "episodes": returns}


def record_udacity(folder: str, out: str, fps: float | None = None) -> dict[str, Any]:
    """A recorded Udacity drive (driving_log.csv + IMG/, from the simulator, `drive --record` or
    `sim --record`) as a video: each centre frame upscaled 2x with the steering, throttle, brake
    and speed of its row drawn beside it, at the recording's own rate (from the file names'
    time stamps; 15 fps when they have none)."""
    from datasets.udacity import decode, read_log
    from nac.config import ConfigError

    if not out.endswith(".mp4"):
        raise ConfigError(f"--out must be an .mp4 file (got {out})")
    rec = read_log(folder)
    times = np.array([s.time for s in rec.samples if s.time is not None])
    if fps is None:
        gaps = np.diff(times) if len(times) > 1 else np.zeros(0)
        gaps = gaps[(gaps > 0) & (gaps < 1)]
        fps = float(np.clip(1.0 / np.median(gaps), 5, 60)) if len(gaps) else 15.0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    w, h, panel = 640, 320, 256
    writer = imageio.get_writer(out, fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=16, ffmpeg_params=["-crf", "23"])
    try:
        for i, s in enumerate(rec.samples):
            tile = Image.new("RGB", (w + panel, h), (18, 18, 22))
            tile.paste(Image.fromarray(decode(s.images["center"])).resize((w, h), Image.BILINEAR), (0, 0))
            d = ImageDraw.Draw(tile)
            x0 = w + 10
            d.text((x0, 10), Path(folder).name[:28], font=_font(15), fill=(255, 255, 255))
            d.text((x0, 34), f"row {i + 1}/{len(rec.samples)}   speed {s.speed:5.1f} mph", font=_font(13), fill=(210, 210, 210))
            _bar(d, x0, 64, panel - 20, s.steering, "steer", True, centred=True)
            _bar(d, x0, 80, panel - 20, s.throttle, "throttle", True)
            _bar(d, x0, 96, panel - 20, s.brake, "brake", True)
            # the steering as a line on the road: where the wheels point
            cx, cy = w // 2, h - 10
            ang = s.steering * np.deg2rad(25.0)
            d.line((cx, cy, cx + 90 * np.sin(ang), cy - 90 * np.cos(ang)), fill=(255, 200, 80), width=5)
            writer.append_data(np.asarray(tile))
    finally:
        writer.close()
    return {"video": out, "frames": len(rec.samples), "fps": fps, "skipped_rows": len(rec.skipped)}
