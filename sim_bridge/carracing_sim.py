"""`nacdrive sim`: gymnasium CarRacing (continuous actions) in the Udacity simulator's role.

Autonomous mode: connects to a bridge as the simulator does (UnityLikeClient), sends 320x160
JPEG telemetry with string fields, applies the steer / throttle it gets back, one exchange per
step. Training mode (--record DIR): the privileged track-following expert drives and every step
is written as the simulator writes training recordings (IMG/center_*.jpg and a driving_log.csv
without header, absolute paths, ", " between fields). Together: record with `sim --record`,
train PilotNet on it (`train --task udacity`), drive `sim` through `drive`.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import cv2
import gymnasium as gym
import numpy as np

from agents.training.collect import SteeringDrift
from agents.carracing.env import FAST_ID
from agents.carracing.state import car_state
from agents.experts.track import TrackFollowingExpert
from agents.driving.rollout import SOLVED, run_episode, shares, summarize
from agents.carracing.scenarios import CLEAN
from datasets.udacity import SEEDS_FILE
from nac.checkpoint import crash_point, holds_anything, write_bytes, write_json
from nac.config import ConfigError
from sim_bridge.config import SimConfig
from sim_bridge.standin import STATS_EVENT, UnityLikeClient, telemetry_fields

MPH_PER_UNIT = 0.3  # CarRacing speed (Box2D units/s, top about 100) shown like the simulator's mph (top 30)
STEER_DEG = 25.0  # telemetry reports the wheel angle in degrees, as the simulator does


def camera(env: gym.Env) -> np.ndarray:
    """(160, 320, 3) RGB: the chase view without the dashboard strip, resized to the simulator's camera."""
    full = env.render()  # (400, 600, 3), render_mode rgb_array
    view = full[: full.shape[0] - 100]  # drop the dashboard: the simulator's camera has none
    return cv2.resize(view, (320, 160), interpolation=cv2.INTER_AREA)


def make_sim_env(max_steps: int, scenario: str = CLEAN) -> gym.Env:
    return gym.make(FAST_ID, continuous=True, render_mode="rgb_array", max_episode_steps=max_steps, scenario=scenario)


def record_training(cfg: SimConfig) -> dict[str, Any]:
    """Training mode: the expert drives; write the simulator's recording format."""
    assert cfg.record is not None
    out = Path(cfg.record).resolve()
    if holds_anything(out):
        raise ConfigError(f"{out} is not empty; record into a new folder (nothing is ever overwritten)")
    client = connect(cfg) if cfg.policy_share else None
    (out / "IMG").mkdir(parents=True, exist_ok=True)
    env = make_sim_env(cfg.max_steps, cfg.scenario)
    rows = 0
    clock = datetime(2026, 1, 1)  # file names carry the time as the simulator's do; a new episode is a new session
    with open(out / "driving_log.csv", "w", newline="") as log:
        for ep in range(cfg.episodes):
            env.reset(seed=cfg.seed + ep)
            # The stand-in records the continuous track expert as CarRacing uses it, whose wheels stay on the road: a
            # demonstration with a wheel on the grass in the hairpins taught PilotNet to cut them and skip a tile
            # (docs/udacity.md, "The expert's road margin").
            expert = TrackFollowingExpert(env)
            expert.reset()
            drift = SteeringDrift(cfg.noise, cfg.seed + ep)
            who = np.random.default_rng([cfg.seed + ep, 1])  # which steps the policy drives (policy_share)
            clock += timedelta(minutes=1)
            executed = np.zeros(3, dtype=np.float32)
            while True:
                frame = camera(env)
                action = np.asarray(expert.select_action(None), dtype=np.float32)  # the label: what the expert would do
                stamp = clock.strftime("%Y_%m_%d_%H_%M_%S_%f")[:-3]
                path = out / "IMG" / f"center_{stamp}.jpg"
                write_bytes(path, cv2.imencode(".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))[1].tobytes(), "recorded frame")
                speed = car_state(env).speed * MPH_PER_UNIT
                log.write(f"{path}, , , {float(action[0]):.6f}, {float(action[1]):.6f}, {float(action[2]):.6f}, {speed:.4f}\n")
                log.flush()  # each row whole, or cut without its line end by a kill (the loader skips such a row)
                crash_point("recorded row")
                rows += 1
                clock += timedelta(milliseconds=1000 / 15)  # the simulator records about 15 frames per second
                if client is not None:  # the policy sees every frame (a head with state needs them all), drives some
                    reply = bridge_reply(client, frame, float(executed[0]) * STEER_DEG, float(executed[1] - executed[2]), speed)
                    if who.random() < cfg.policy_share and reply is not None:
                        action = car_action(*reply)
                executed = drift(action) if cfg.noise else action
                _, _, term, trunc, _ = env.step(executed)
                if term or trunc:
                    break
    if client is not None:
        client.close()
    env.close()
    write_json(out / SEEDS_FILE, {"seeds": list(range(cfg.seed, cfg.seed + cfg.episodes))})
    return {"rows": rows, "folder": str(out)}


def connect(cfg: SimConfig) -> UnityLikeClient:
    try:
        return UnityLikeClient(cfg.host, cfg.port, connect_timeout=cfg.wait)
    except OSError as exc:  # the simulator's client waits for the server; after its timeout, say what to start
        raise ConfigError(f"no bridge answers at {cfg.host}:{cfg.port} ({exc}); start one with 'nacdrive drive RUN' first, "
                          "or give its --host / --port") from None


def bridge_reply(client: UnityLikeClient, frame: np.ndarray, steer_deg: float, throttle: float, speed: float) -> tuple[float, float] | None:
    """One telemetry -> (steering in [-1, 1], throttle in [-1, 1]) from the bridge; None for a reply that is not `steer`."""
    name, reply = client.exchange(telemetry_fields(frame, steer_deg, throttle, speed))
    if name != "steer" or not isinstance(reply, dict):
        return None
    return float(reply["steering_angle"]), float(reply["throttle"])  # the simulator's float.Parse of a string


def car_action(steer: float, throttle: float) -> np.ndarray:
    """The simulator's controls (steering, and throttle in [-1, 1], braking below 0) as CarRacing's (steer, gas, brake)."""
    return np.array([steer, max(0.0, throttle), max(0.0, -throttle)], dtype=np.float32)


class BridgeDriver:
    """The bridge as a policy (agents.driving.rollout.Policy): each step sends the environment's camera frame, speed and last
    controls as the simulator's telemetry and applies the steer / throttle that comes back. Counts the replies that are
    not `steer` (driven as no steer, no throttle) and times each round trip."""

    def __init__(self, env: gym.Env, client: UnityLikeClient) -> None:
        self.env, self.client = env, client
        self.unexpected_replies, self.rtt_ms = 0, []
        self.reset()

    def reset(self) -> None:
        self.steer_deg, self.throttle = 0.0, 0.0

    def select_action(self, obs: Any = None) -> np.ndarray:
        speed = car_state(self.env).speed * MPH_PER_UNIT
        t0 = time.perf_counter()
        reply = bridge_reply(self.client, camera(self.env), self.steer_deg, self.throttle, speed)
        self.rtt_ms.append((time.perf_counter() - t0) * 1e3)
        self.unexpected_replies += reply is None
        steer, self.throttle = reply or (0.0, 0.0)
        self.steer_deg = steer * STEER_DEG
        return car_action(steer, self.throttle)


def drive_autonomous(cfg: SimConfig) -> dict[str, Any]:
    """Autonomous mode: one telemetry -> one reply per step, through the bridge. Returns the
    closed-loop statistics (as `nacdrive evaluate` gives them) and the bridge's own view."""
    client = connect(cfg)
    env = make_sim_env(cfg.max_steps, cfg.scenario)
    seeds = list(range(cfg.seed, cfg.seed + cfg.episodes))
    driver = BridgeDriver(env, client)
    try:
        before = client.request(STATS_EVENT)
        clash = sorted(set(seeds) & set(before.get("training_seeds", [])))
        if clash:
            raise ConfigError(f"seeds {clash[0]}..{clash[-1]} are tracks the bridge's model was trained on; evaluate on other seeds "
                              f"(--seed {max(before['training_seeds']) + 1} or higher)")
        results = [run_episode(env, driver, seed) for seed in seeds]
        bridge = client.request(STATS_EVENT)
    finally:
        client.close()
        env.close()
    return {
        **summarize(r.episode_return for r in results),
        **shares(results),
        "seeds": seeds, "returns": [r.episode_return for r in results], "episodes_detail": [r.to_dict() for r in results],
        "unexpected_replies": driver.unexpected_replies,
        "round_trip_p50_ms": float(np.percentile(driver.rtt_ms, 50)), "round_trip_p99_ms": float(np.percentile(driver.rtt_ms, 99)),
        "bridge": {k: v for k, v in bridge.items() if k != "training_seeds"},
        "solved_threshold": SOLVED,
    }


def to_markdown(r: dict[str, Any]) -> str:
    """The drive's figures as a Markdown table, the bridge's view beside them."""
    b = r["bridge"]
    lines = [
        "| episodes | mean ± std | min | 95 % CI | laps finished | lost to a skipped tile | tiles | round trip p50 / p99 ms | bridge p50 / p99 ms | bridge frames | bad telemetry |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {r['episodes']} | {r['mean_return']:.1f} ± {r['std_return']:.1f} | {r['min_return']:.1f} | "
        + (f"[{r['ci95_low']:.1f}, {r['ci95_high']:.1f}]" if r["episodes"] > 1 else "-")
        + f" | {r['finished_share']:.0%} | {r['skipped_share']:.0%} | {r['tiles_share']:.1%} | {r['round_trip_p50_ms']:.1f} / {r['round_trip_p99_ms']:.1f} "
        f"| {b.get('p50_ms', float('nan')):.1f} / {b.get('p99_ms', float('nan')):.1f} | {b.get('frames', 0)} | {b.get('bad') or 'none'} |",
        "",
        "returns by seed: " + ", ".join(f"{s}: {x:.1f}" for s, x in zip(r["seeds"], r["returns"])),
    ]
    return "\n".join(lines)
