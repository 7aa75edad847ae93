"""The driving policy: a trained run folder behind the one policy contract (reset / select_action).

Streaming: each step encodes only the new frame (one CNN pass) and feeds its features to the
head's streaming API (NAC caches its past keys, other heads keep their window's inputs), so a
step costs the same at step 5 as at step 900 and gives exactly what training's windows gave.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from agents.carracing.env import FPS
from agents.carracing.wheel import WHEEL_LIMIT, WheelDecoder, frame_speed
from agents.driving.views import VIEWS_SEED, randconv_weights, seen_through
from nac.driving import DrivingNet
from nac.config import ConfigError
from nac.checkpoint import load_checkpoint

WEIGHTS = ("best", "last")
DECODERS = ("argmax", "sample", "diffuse", "wheel")  # how discrete actions are taken from the network (DrivingPolicy)


def default_decoder(net: dict[str, Any]) -> str:
    """How a run's discrete actions are taken unless asked otherwise, from its network's config
    (DrivingNetConfig as a dict): a wheel-angle network steers its wheels ("wheel", the only
    decoder it has), one trained on action rates diffuses them, any other takes the argmax."""
    return "wheel" if net.get("wheel_target") else "diffuse" if net.get("rate_window") else "argmax"


def check_decoder(net: dict[str, Any], actions: str) -> None:
    """Refuses a decoder that does not fit the network (a wheel angle is not a softmax)."""
    if actions not in DECODERS:
        raise ConfigError(f"actions must be one of {', '.join(DECODERS)} (got {actions!r})")
    if (actions == "wheel") != bool(net.get("wheel_target")):
        raise ConfigError("--actions wheel is for runs trained with --wheel-target, and those have no other decoder "
                          f"(asked for {actions!r} with a network {'with' if net.get('wheel_target') else 'without'} a wheel target)")


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda when present, else cpu; anything else as torch understands it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for, but this machine has no CUDA GPU; use --device cpu or auto")
    return dev


def load_run(path: str | Path, weights: str = "best", device: str = "cpu") -> DrivingNet:
    """The network of a run folder (config.json + <weights>.safetensors), in eval mode."""
    p = Path(path)
    if weights not in WEIGHTS:
        raise ConfigError(f"weights must be one of {', '.join(WEIGHTS)} (got {weights!r})")
    if not p.is_dir():
        raise FileNotFoundError(f"{p} is not a run folder (train one with 'nacdrive train')")
    config, state = load_checkpoint(p, "cpu", weights)
    return DrivingNet.from_checkpoint(config, state, p).to(resolve_device(device)).eval()


class DrivingPolicy:
    """select_action(frame (96, 96, 3) uint8) -> a discrete action (int) or (steer, gas, brake).

    Discrete actions are decoded from the softmax by `actions` (report which one a figure used):
    "argmax" takes the likeliest; "sample" draws one; "diffuse" pulses at the softmax's rates
    without chance: it adds each step's probabilities to a running credit per action, takes the
    action with the most credit and charges it 1 (error diffusion, a sigma-delta modulator).
    Argmax cannot reproduce an expert that pulses (steer 1 step in 3 is never the likeliest
    action); sampling can, with random runs; diffusion gives the same rates in regular pulses.
    A wheel-angle network (DrivingNetConfig.wheel_target) is driven by "wheel" (agents.carracing.wheel.WheelDecoder):
    the policy follows its front wheels from its own actions (agents.carracing.wheel.wheel_after, from straight at
    reset) and takes the action that brings them nearest the angle the network asked for WHEEL_DELAY
    steps before (no action instead of gas where the speed excess it predicts is above 0), or brakes
    when the excess is above the expert's margin (it counts on every step being its own: a step
    that repeats its last action without asking, as dropped frames do in agents.carracing.perturb, turns the
    real wheels without its model). A network that learned the expert's target speed instead of
    the excess (DrivingNetConfig.wheel_speed "target") is driven on the speed the frame's speed bar
    shows above it (agents.carracing.wheel.frame_speed).
    By default (actions=None) each network gets its own (default_decoder).
    After each step `last` holds what the network produced (for overlays and analysis; of the last
    episode when several are driven together: reset_batch, select_actions).
    """

    def __init__(self, net: DrivingNet, actions: str | None = None, seed: int = 0, drive_average: int | None = None) -> None:
        if actions is None:
            actions = default_decoder(net.config.to_dict())
        if net.config.action_space == "discrete":
            check_decoder(net.config.to_dict(), actions)
        elif actions not in DECODERS:
            raise ConfigError(f"actions must be one of {', '.join(DECODERS)} (got {actions!r})")
        self.net = net.eval()
        self.cfg = net.config
        self.actions = actions
        # random-convolution views averaged when it drives (DrivingNetConfig.drive_average): the network's own unless given
        self.average = net.config.drive_average if drive_average is None else drive_average
        if self.average < 0:
            raise ConfigError(f"drive average must be >= 0 views (got {self.average})")
        self.device = next(net.parameters()).device
        self._rng = np.random.default_rng(seed)
        self.last: dict[str, Any] = {}
        self.reset()

    @classmethod
    def from_run(cls, path: str | Path, weights: str = "best", device: str = "cpu", actions: str | None = None, seed: int = 0,
                 drive_average: int | None = None) -> "DrivingPolicy":
        return cls(load_run(path, weights, device), actions=actions, seed=seed, drive_average=drive_average)

    @property
    def continuous(self) -> bool:
        return self.cfg.action_space == "continuous"

    def reset(self, seed: int | None = None) -> None:
        """A new episode (seed: the "sample" decoder's draws, when given)."""
        self.reset_batch([seed])

    def reset_batch(self, seeds: Sequence[int | None]) -> None:
        """len(seeds) episodes driven together, one batched forward a step (select_actions): each
        episode's streams, decoder and draws are its own, as if it were driven alone."""
        self._rngs = [self._rng if seed is None else np.random.default_rng(seed) for seed in seeds]
        self._rng = self._rngs[0]
        self._batch = len(seeds)
        self._views = None  # drive_average: each episode's random convolutions, (B * M, 3, 3, 3, 3)
        if self.average:
            m = self.average
            self._views = torch.as_tensor(np.concatenate([
                randconv_weights(m, np.random.default_rng([VIEWS_SEED, seed]) if seed is not None else self._rng, mixed=True)
                for seed in seeds]), dtype=torch.float32, device=self.device)
        self._steps = 0
        self._credit = np.zeros((self._batch, self.cfg.outputs))  # "diffuse": each action's probability owed
        self._decoders = [WheelDecoder(horizon=self.cfg.wheel_horizon) for _ in seeds]  # "wheel": the front wheels as the policy's own actions have turned them
        self._first: tuple[torch.Tensor, torch.Tensor] | None = None  # first frame's features (B, F) and times (B,)
        self._recent: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=self.cfg.span)  # for window()
        # One head stream per phase of the frame stride: stream p sees steps p, p + s, p + 2s, ...
        self._streams: list[Any] = [None] * self.cfg.frame_stride

    @torch.inference_mode()
    def select_action(self, frame: np.ndarray, timestamp: float | None = None) -> Any:
        """frame: the camera image as the environment gives it; timestamp: its time in seconds
        since the episode began (default: step count / 50 FPS)."""
        if self._batch != 1:
            raise RuntimeError(f"select_action drives one episode; this policy was reset for {self._batch} (use select_actions)")
        return self._act(self.raw_output(frame[None], timestamp)[0], frame, 0)

    @torch.inference_mode()
    def select_actions(self, frames: np.ndarray) -> list[Any]:
        """frames: (B, 96, 96, 3), one per episode of reset_batch, all at the same step -> B actions."""
        raw = self.raw_output(frames)
        return [self._act(raw[i], frames[i], i) for i in range(len(frames))]

    @torch.inference_mode()
    def raw_output(self, frames: np.ndarray, timestamp: float | None = None) -> torch.Tensor:
        """The network's readout (B, A) on a frame per episode (B, H, W, 3), before any decoding;
        advances the episodes by a step."""
        t = self._steps / FPS if timestamp is None else float(timestamp)
        if len(frames) != self._batch:
            raise ValueError(f"raw_output: {len(frames)} frames for {self._batch} episodes")
        x = torch.as_tensor(np.ascontiguousarray(frames), device=self.device)  # (B, H, W, 3)
        if self._views is not None:  # every episode's frame through each of its random convolutions: (B * M, H, W, 3)
            x = seen_through(x.repeat_interleave(self.average, 0), self._views)
        feat = self.net.encode(x)  # (B, F): the CNN gives each frame the same features in a batch as alone
        t_ = torch.full((len(x),), t, dtype=torch.float32, device=self.device)
        if self._first is None:
            self._first = (feat, t_)
        self._recent.append((feat, t_))
        phase = self._steps % self.cfg.frame_stride
        head = self.net.head
        if self._streams[phase] is None:
            # Before the episode's first frame, windows repeat it (as datasets.windows does).
            state = head.init_state(len(x))  # a stream per episode, or per view of each (drive_average)
            f0, t0 = self._first
            for _ in range(self.cfg.window - 1):
                _, state = head.step(f0, state, self.net.head_time(t0))
            self._streams[phase] = state
        h, self._streams[phase] = head.step(feat, self._streams[phase], self.net.head_time(t_))
        self._steps += 1
        out = self.net.readout(h)  # (B, A), or (B * M, A) with drive_average
        return out if self._views is None else out.reshape(self._batch, self.average, -1).mean(1)

    def window(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The features (B, W, F) and times (B, W) the head saw at the latest step, as training's
        windows cut them (for overlays and analysis; the stream itself does not need them); B * M rows, each episode's
        views in turn, with drive_average M."""
        if self._first is None:
            raise RuntimeError("window() needs at least one select_action() since reset()")
        n = len(self._recent)
        picks = []
        for k in range(self.cfg.window - 1, -1, -1):
            back = k * self.cfg.frame_stride  # steps before the latest
            picks.append(self._recent[n - 1 - back] if back < n and self._steps - 1 - back >= 0 else self._first)
        return torch.stack([f for f, _ in picks], dim=1), torch.stack([t for _, t in picks], dim=1)

    def _act(self, raw: torch.Tensor, frame: np.ndarray, i: int) -> Any:
        """Episode i's action from its readout raw (A,) and its frame."""
        if self.continuous:
            action = self.net.squash(raw).float().cpu().numpy()
            self.last = {"action": action}
            return action
        if self.actions == "wheel":
            target = WHEEL_LIMIT * float(torch.tanh(raw[0].float()))
            speed = frame_speed(frame) if self.cfg.wheel_speed == "target" else math.nan  # what the speed bar shows
            excess = float(self.cfg.speed_excess(raw[1].double(), speed))
            decoder = self._decoders[i]
            action = decoder(target, excess)  # the expert's own speed rules, on the excess the network sees
            self.last = {"action": action, "wheel_target": target, "wheel_aim": decoder.aim, "wheel": decoder.wheel,
                         "speed_excess": excess, "speed_read": speed, "brake": action == 4}
            return action
        probs = torch.softmax(raw.float(), -1).cpu().numpy().astype(np.float64)
        if self.actions == "sample":
            action = int(self._rngs[i].choice(len(probs), p=probs / probs.sum()))
        elif self.actions == "diffuse":
            self._credit[i] += probs
            action = int(self._credit[i].argmax())
            self._credit[i, action] -= 1.0
        else:
            action = int(probs.argmax())
        self.last = {"action": action, "probs": probs}
        return action
