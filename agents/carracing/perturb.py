"""Perturbations between the environment and the policy, for robustness in closed loop.

They change only what the policy sees and when (and, for action-noise, what the car executes);
the environment and its reward are untouched. Each is reproducible under the episode seed.

- `drop=p`: each frame is lost with probability p; the policy sees nothing new that step (the
  previous action is repeated) and heads that take timestamps get the true time of each frame
  it did see.
- `jitter=s`: frames arrive at irregular times: after each delivered frame the next one comes
  1..s steps later (uniform); the policy acts on the stale frame meanwhile; true timestamps.
- `hold=s`: the policy sees every frame on time, but the car executes each action it decides
  for 1..s steps (uniform), whatever the policy asks meanwhile: jitter's sample-and-hold of the
  controls without its irregular frames (the two are apart: a policy that fails under jitter
  and not under hold fails on the frames it sees, one that fails under both, on the hold).
- `delay=k`: the policy sees each frame k steps late (with that frame's true time).
- `noise=sigma`: Gaussian pixel noise (sigma in units of the 0..255 range / 255).
- `blur[=sigma]`: Gaussian blur (default sigma 1 pixel).
- `brightness=f`: pixel values scaled by f.
- `hue[=shift]`: hue rotated by shift of a full turn (default 0.1).
- `action-noise=p`: the car executes a random action with probability p (a recovery test).
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from agents.carracing import scenarios
from agents.carracing.env import ACTIONS, FPS
from nac.config import ConfigError

KINDS = {  # name -> (default level, allowed range text, check)
    "drop": (None, "0 <= p < 1", lambda x: 0 <= x < 1),
    "jitter": (None, "a whole number >= 1", lambda x: x >= 1 and float(x).is_integer()),
    "hold": (None, "a whole number >= 1", lambda x: x >= 1 and float(x).is_integer()),
    "delay": (None, "a whole number >= 0", lambda x: x >= 0 and float(x).is_integer()),
    "noise": (None, "sigma >= 0", lambda x: x >= 0),
    "blur": (1.0, "sigma > 0", lambda x: x > 0),
    "brightness": (None, "f > 0", lambda x: x > 0),
    "hue": (0.1, "a shift in [-1, 1]", lambda x: -1 <= x <= 1),
    "action-noise": (None, "0 <= p <= 1", lambda x: 0 <= x <= 1),
}


@dataclass(frozen=True)
class Perturbation:
    name: str
    level: float

    def __str__(self) -> str:
        return f"{self.name}={self.level:g}"


CLEAN = "none"  # the name of the clean level in a sweep of levels


def parse(text: str) -> Perturbation:
    """"drop=0.2" -> Perturbation("drop", 0.2); a clear error naming what is allowed."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if name not in KINDS:
        raise ConfigError(f"unknown perturbation {name!r}; choose from {', '.join(KINDS)} (or none: the clean level)")
    default, allowed, ok = KINDS[name]
    if not sep:
        if default is None:
            raise ConfigError(f"perturbation {name} needs a level: {name}=LEVEL ({allowed})")
        return Perturbation(name, default)
    try:
        level = float(value)
    except ValueError:
        raise ConfigError(f"perturbation {name}: level {value!r} is not a number ({allowed})") from None
    if not ok(level):
        raise ConfigError(f"perturbation {name}: level {value} is out of range ({allowed})")
    return Perturbation(name, level)


@dataclass(frozen=True)
class Level:
    """One condition episodes are driven in: a scenario of the environment (agents.carracing.scenarios) and
    a perturbation between it and the policy, each optional. Written "none" (clean), "color",
    "drop=0.2" or both joined by "+": "color+drop=0.2"."""

    scenario: str = scenarios.CLEAN
    perturbation: str | None = None  # as given, checked by parse


def parse_level(text: str) -> Level:
    """"color+drop=0.2" -> Level("color", "drop=0.2"); a clear error naming what is allowed."""
    scenario, perturbation = scenarios.CLEAN, None
    parts = [p.strip() for p in text.split("+")]
    if parts == [CLEAN]:
        return Level()
    for part in parts:
        if part in scenarios.SCENARIOS and part != scenarios.CLEAN:
            if scenario != scenarios.CLEAN:
                raise ConfigError(f"level {text!r} names two scenarios; a level is SCENARIO, PERTURBATION or SCENARIO+PERTURBATION")
            scenario = part
        elif part.partition("=")[0].strip() in KINDS:
            if perturbation is not None:
                raise ConfigError(f"level {text!r} names two perturbations; a level is SCENARIO, PERTURBATION or SCENARIO+PERTURBATION")
            parse(part)
            perturbation = part
        else:
            allowed = ", ".join(s for s in scenarios.SCENARIOS if s != scenarios.CLEAN)
            raise ConfigError(f"unknown scenario or perturbation {part!r} in level {text!r}; scenarios: {allowed}; "
                              f"perturbations: {', '.join(KINDS)}; or none: the clean level")
    return Level(scenario, perturbation)


def transform_frame(frame: np.ndarray, p: Perturbation, rng: np.random.Generator) -> np.ndarray:
    """The frame as the perturbed sensor gives it (uint8, same shape)."""
    if p.name == "noise":
        noisy = frame.astype(np.float32) + rng.normal(0, p.level * 255, frame.shape)
        return np.clip(noisy, 0, 255).astype(np.uint8)
    if p.name == "blur":
        return cv2.GaussianBlur(frame, (0, 0), p.level)
    if p.name == "brightness":
        return np.clip(frame.astype(np.float32) * p.level, 0, 255).astype(np.uint8)
    if p.name == "hue":
        hsv = cv2.cvtColor(frame, cv2.COLOR_RGB2HSV)  # OpenCV hue in 0..179
        hsv[..., 0] = ((hsv[..., 0].astype(np.int32) + int(round(p.level * 180))) % 180).astype(np.uint8)
        return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    return frame


class PerturbedPolicy:
    """Wraps a policy (select_action(frame, timestamp)); reset(seed) makes the perturbation's
    random draws a function of (episode seed, perturbation); reset() without one keeps the last
    seed (the constructor's at first), for drivers that reset what they wrap without a seed."""

    def __init__(self, policy: Any, perturbation: Perturbation, continuous: bool, seed: int = 0) -> None:
        self.policy, self.p, self.continuous, self.seed = policy, perturbation, continuous, seed
        self.rng = np.random.default_rng(0)
        self.seen_times: list[float] = []  # the timestamps the policy was given (for tests)

    def reset(self, seed: int | None = None) -> None:
        self.seed = self.seed if seed is None else seed
        seed = self.seed
        self.rng = np.random.default_rng([seed, zlib.crc32(str(self.p).encode())])
        self.policy.reset()
        self.step = 0
        self.last_action: Any = None
        self.held: Any = None  # jitter, hold: the action the car executes until the next frame / decision
        self.saw = False  # whether the policy saw the latest frame when it came (a DAgger rollout records it)
        self.queue: deque[tuple[np.ndarray, float]] = deque()
        self.next_delivery = 0
        self.seen_times = []

    def _see(self, frame: np.ndarray, t: float) -> Any:
        self.seen_times.append(t)
        self.last_action = self.policy.select_action(transform_frame(frame, self.p, self.rng), timestamp=t)
        return self.last_action

    def _random_action(self) -> Any:
        if self.continuous:
            return np.array([self.rng.uniform(-1, 1), self.rng.uniform(0, 1), self.rng.uniform(0, 1)], dtype=np.float32)
        return int(self.rng.integers(len(ACTIONS)))

    def select_action(self, frame: np.ndarray) -> Any:
        t = self.step / FPS  # the true time of this frame
        self.step += 1
        seen = len(self.seen_times)
        name, level = self.p.name, self.p.level
        if name == "drop":
            lost = self.last_action is not None and self.rng.random() < level  # the first frame always arrives
            action = self.last_action if lost else self._see(frame, t)
        elif name in ("jitter", "hold"):
            fresh = self.step - 1 >= self.next_delivery  # a frame arrives (jitter) or a new action is taken (hold)
            if fresh:
                self.next_delivery = self.step - 1 + int(self.rng.integers(1, int(level) + 1))
            if fresh or name == "hold":  # under hold the policy sees every frame on time
                decided = self._see(frame, t)
                if fresh:
                    self.held = decided
            action = self.held
        elif name == "delay":
            self.queue.append((frame, t))
            if len(self.queue) > int(level):
                action = self._see(*self.queue.popleft())
            else:  # no frame has arrived yet: the car coasts (no-op)
                action = np.zeros(3, np.float32) if self.continuous else 0
        else:
            action = self._see(frame, t)
        self.saw = len(self.seen_times) > seen and self.seen_times[-1] == t
        if name == "action-noise" and self.rng.random() < level:
            return self._random_action()
        return action


def level_panel(ax: Any, kind: str, ylabel: str) -> None:
    """One panel of a return-against-perturbation-level figure (evaluate's and a study's)."""
    ax.set_xlabel(f"{kind} level")
    ax.set_ylabel(ylabel)
    ax.set_title(kind)
    ax.grid(alpha=0.3)
