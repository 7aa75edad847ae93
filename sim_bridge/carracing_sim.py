"""`nacdrive sim`: gymnasium CarRacing (continuous actions) in the Udacity simulator's role.

Autonomous mode: connects to a bridge as the simulator does (UnityLikeClient), sends 320x160
JPEG telemetry with string fields, applies the steer / throttle it gets back, one exchange per
step. Training mode (--record DIR): the privileged track-following expert drives and every step
is written as the simulator writes training recordings (IMG/center_*.jpg and a driving_log.csv
without header, absolute paths, ", " between fields). Together: record with `sim --record`,
train PilotNet on it (`train --task udacity`), drive `sim` through `drive`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import cv2
import gymnasium as gym
import numpy as np

from agents.env import ENV_ID, car_state
from agents.experts import make_expert
from nac.config import ConfigError, need
from sim_bridge.standin import UnityLikeClient, telemetry_fields

MPH_PER_UNIT = 0.3  # CarRacing speed (Box2D units/s, top about 100) shown like the simulator's mph (top 30)
STEER_DEG = 25.0  # telemetry reports the wheel angle in degrees, as the simulator does


def camera(env: gym.Env) -> np.ndarray:
    """(160, 320, 3) RGB: the chase view without the dashboard strip, resized to the simulator's camera."""
    full = env.render()  # (400, 600, 3), render_mode rgb_array
    view = full[: full.shape[0] - 100]  # drop the dashboard: the simulator's camera has none
    return cv2.resize(view, (320, 160), interpolation=cv2.INTER_AREA)


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 4567
    seed: int = 20000
    episodes: int = 1
    max_steps: int = 1000
    record: str | None = None  # training mode: the expert drives, frames + driving_log.csv go here

    def __post_init__(self) -> None:
        need(0 < self.port < 65536, f"port must be 1..65535 (got {self.port})")
        need(self.episodes >= 1 and self.max_steps >= 1, "episodes and max-steps must be >= 1")


def make_sim_env(max_steps: int) -> gym.Env:
    return gym.make(ENV_ID, continuous=True, render_mode="rgb_array", max_episode_steps=max_steps)


def record_training(cfg: SimConfig) -> dict[str, Any]:
    """Training mode: the expert drives; write the simulator's recording format."""
    assert cfg.record is not None
    out = Path(cfg.record).resolve()
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; record into a new folder (nothing is ever overwritten)")
    (out / "IMG").mkdir(parents=True, exist_ok=True)
    env = make_sim_env(cfg.max_steps)
    rows = 0
    clock = datetime(2026, 1, 1)  # file names carry the time as the simulator's do; a new episode is a new session
    with open(out / "driving_log.csv", "w", newline="") as log:
        for ep in range(cfg.episodes):
            env.reset(seed=cfg.seed + ep)
            expert = make_expert("track", env)
            expert.reset()
            clock += timedelta(minutes=1)
            while True:
                frame = camera(env)
                action = np.asarray(expert.select_action(None), dtype=np.float32)
                stamp = clock.strftime("%Y_%m_%d_%H_%M_%S_%f")[:-3]
                path = out / "IMG" / f"center_{stamp}.jpg"
                cv2.imwrite(str(path), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
                speed = car_state(env).speed * MPH_PER_UNIT
                log.write(f"{path}, , , {float(action[0]):.6f}, {float(action[1]):.6f}, {float(action[2]):.6f}, {speed:.4f}\n")
                rows += 1
                clock += timedelta(milliseconds=1000 / 15)  # the simulator records about 15 frames per second
                _, _, term, trunc, _ = env.step(action)
                if term or trunc:
                    break
    env.close()
    return {"rows": rows, "folder": str(out)}


def drive_autonomous(cfg: SimConfig) -> dict[str, Any]:
    """Autonomous mode: one telemetry -> one reply per step, through the bridge."""
    env = make_sim_env(cfg.max_steps)
    client = UnityLikeClient(cfg.host, cfg.port)
    returns, bad_replies = [], 0
    try:
        for ep in range(cfg.episodes):
            env.reset(seed=cfg.seed + ep)
            total, steer_deg, throttle = 0.0, 0.0, 0.0
            while True:
                speed = car_state(env).speed * MPH_PER_UNIT
                name, reply = client.exchange(telemetry_fields(camera(env), steer_deg, throttle, speed))
                if name != "steer" or not isinstance(reply, dict):
                    bad_replies += 1
                    steer, throttle = 0.0, 0.0
                else:
                    steer = float(reply["steering_angle"])  # the simulator's float.Parse of a string
                    throttle = float(reply["throttle"])
                steer_deg = steer * STEER_DEG
                action = np.array([steer, max(0.0, throttle), max(0.0, -throttle)], dtype=np.float32)
                _, reward, term, trunc, _ = env.step(action)
                total += float(reward)
                if term or trunc:
                    break
            returns.append(total)
    finally:
        client.close()
        env.close()
    return {"returns": returns, "unexpected_replies": bad_replies}
