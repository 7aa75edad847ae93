"""The CarRacing driving network: a small CNN per frame, a sequence head from the registry over
the last W frames, a dense layer and the action output.

The CNN is the paper's (Conv2d 3->10 k3 s2, 10->20 k5 s2, 20->30 k5 s2, ReLU, dropout 0.2);
unlike the authors' model, which fed its head a single frame, the head sees a real window.
The network knows no environment: it maps uint8 frames (and their times) to action outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from nac.heads import HEADS, HeadConfig, SequenceHead, build_head
from nac.config import ConfigDict, ConfigError, above, at_least, between, check_ranges, need
from nac.checkpoint import build_loaded, load_checkpoint, save_checkpoint

ACTION_SPACES = ("discrete", "continuous")
DISCRETE_ACTIONS = 5  # gymnasium CarRacing: noop, right, left, gas, brake
CONTINUOUS_ACTIONS = 3  # steer in [-1, 1], gas and brake in [0, 1]
WHEEL_SPEEDS = ("excess", "target")  # a wheel-angle network's second output (DrivingNetConfig.wheel_speed)
# what the CNN is given of a frame (DrivingNetConfig.frame_input)
FRAME_INPUTS = ("rgb", "contrast", "contrast-scaled", "rgb+contrast", "rgb+contrast-scaled")
CONTRAST_FROM = ("scene", "ahead")  # the colour the contrast is measured from (DrivingNetConfig.contrast_from)
# CarRacing draws its view around the car: in every frame the car sits at rows 67..76, columns 46..49 (of 96). "ahead"
# measures the contrast from the median colour of the 8 x 8 pixels just in front of its nose (rows 57..64, columns
# 44..51), what the car is about to drive on; as fractions of the frame's side, for other frame sizes
AHEAD_ROWS, AHEAD_COLS = (57 / 96, 65 / 96), (44 / 96, 52 / 96)


def ahead_patch(size: int) -> tuple[slice, slice]:
    """The rows and columns of the patch just in front of the car (AHEAD_ROWS, AHEAD_COLS) in a size x size frame."""
    return tuple(slice(round(a * size), round(b * size)) for a, b in (AHEAD_ROWS, AHEAD_COLS))  # type: ignore[return-value]
TASK = "carracing"


class Dropout(nn.Dropout):
    """nn.Dropout whose mask, on the CPU, comes from numpy's PCG64 rather than torch's Bernoulli
    sampler: torch's costs about 11 ns an element on this CPU (the first conv layer's output of a
    training batch, 1.75 M elements: 20 ms for F.dropout on one thread, a fifth of the whole
    training step), 16 random bits from numpy about 1.7 ns. Each element is kept where its 16 bits
    are >= round(p * 65536) (p = 0.2: dropped with probability 0.19999695) and scaled by the inverse
    of the keep probability, so the expected output is the input, as nn.Dropout's. The numpy
    generator is seeded from torch's, so torch.manual_seed decides the masks (training seeds it
    per step). Elsewhere (CUDA, evaluation, p = 0): nn.Dropout itself. No weights: checkpoints
    are the same either way."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.inplace:
            return super().forward(x)
        cut = round(self.p * 65536)
        seed = int(torch.randint(0, 2**62, (1,)))
        bits = np.frombuffer(np.random.default_rng(seed).bytes(2 * x.numel()), dtype=np.uint16)
        keep = torch.from_numpy(bits >= cut).view(x.shape).to(x.dtype)
        return x * keep.mul_(65536 / (65536 - cut))


@dataclass
class DrivingNetConfig(ConfigDict):
    """Everything needed to rebuild a driving network (saved as config.json beside its weights)."""

    WHAT: ClassVar[str] = "driving-network options"

    head: str = "nac"  # sequence head, a registry name (nac.heads.head_names())
    action_space: str = "discrete"  # "discrete": 5 logits; "continuous": steer, gas, brake
    window: int = field(default=8, metadata=at_least(1))  # frames the head sees (the current one and W - 1 before it)
    frame_stride: int = field(default=1, metadata=at_least(1))  # steps between the window's frames
    frame_size: int = field(default=96, metadata=at_least(32))  # frames are frame_size x frame_size x 3 uint8
    d_model: int = field(default=64, metadata=at_least(1))  # head width
    num_heads: int = field(default=16, metadata=at_least(1))  # attention heads (nac, mha)
    nac: dict[str, Any] = field(default_factory=dict)  # NAC options
    hidden: int = 64  # the dense layer after the head
    dropout: float = field(default=0.2, metadata=between(0, 1, hi_open=True))  # after each conv layer and the dense layer (training only)
    use_time: bool = True  # give heads that accept time (nac, ctrnn, cfc, ltc) each frame's time
    time_unit: float = field(default=1.0 / 50, metadata=above(0))  # seconds per unit of head time (one CarRacing step at 50 FPS)
    brake_gate: bool = False  # continuous: a fourth output decides whether to brake at all (the expert brakes in rare, hard
    # pulses; one regressed brake learns their mean, a small brake on every step); the brake output is then how hard
    rate_window: int = 0  # discrete: > 0, the softmax is each action's local rate (its share of the expert's actions over
    # steps t-K..t+K, which the scene shows) rather than the one action of step t (which depends on the phase of the
    # expert's steering pulses, which a frame does not show); the policy then drives by error diffusion of those rates
    wheel_target: bool = False  # discrete: two outputs, the front-wheel angle the expert plans a few steps ahead (squashed
    # by the policy into the joint's range) and the car's speed above the expert's target speed (in excess_scale units);
    # the policy brakes when the excess is above the expert's margin, else takes the action that brings its wheels
    # nearest that angle (agents.carracing.wheel.wheel_action): what the pulses aim at, which a frame shows, rather than the pulses
    excess_scale: float = field(default=20.0, metadata=above(0))  # wheel_target: u/s; the speed excess is learned clipped to +-this, in units of it (the sign and
    # the last u/s before braking are what matter: -80 at low speed on a straight says no more than -20)
    wheel_speed: str = field(default="excess", metadata={"choices": WHEEL_SPEEDS})  # wheel_target: what the second output is (WHEEL_SPEEDS): "excess", the car's speed above the
    # expert's target speed; "target", the expert's target speed itself, within target_speeds (a sigmoid between them), and
    # the policy's excess is the speed the frame's speed bar shows (agents.carracing.wheel.frame_speed) above it: the network then need
    # not read the bar, a few faint pixels, which networks trained on the excess misread (at a standstill they went on
    # braking: docs/studies/discrete-heads/README.md), and it cannot ask for more than the expert's top speed
    wheel_horizon: int = field(default=1, metadata=between(1, 4))  # wheel_target: the steps the policy's decoder looks ahead when it chooses how to steer towards
    # the angles asked (agents.carracing.wheel.WheelDecoder's horizon; 1: the nearest after this step)
    drive_average: int = 0  # > 0: when it drives, the policy sees each frame through this many random convolutions (the
    # identity mixed with Xavier weights, fixed for an episode by its seed) and averages the readouts, Lee et al. 2020's Monte
    # Carlo approximation over random networks (agents.driving.views); training never uses it
    frame_input: str = field(default="rgb", metadata={"choices": FRAME_INPUTS})  # what the CNN sees of a frame
    # (FRAME_INPUTS): "rgb", the frame itself; "contrast", above the instrument strip each pixel's colour distance from
    # the scene's median colour (its dominant colour), the same in the three channels, so that a region shows by how far
    # its colour is from the rest of the scene, not by which colour it is nor whether it is lighter or darker (a road
    # lighter than its grass looks as one darker does); the frame's own statistics, nothing known of which pixels are
    # road. The strip stays as it is: its bars read by their colours (white speed on black). "rgb+contrast": both, the
    # contrast as a fourth channel (the first convolution then takes 4 channels). "contrast-scaled" (alone or after
    # "rgb+"): the contrast over its mean across the scene, so that a scene drawn in fainter or stronger colours looks as
    # the clean one does (a road twice as far from its grass in colour is not twice as bright)
    contrast_flip: float = field(default=0.0, metadata=between(0, 1, hi_open=True))  # training only, with contrast or rgb+contrast: the share of frames whose contrast is
    # turned over (1 - c), drawn per frame from torch's generator as dropout is: the road, a light band in the contrast
    # of a plain scene, is then seen as a dark one too, as a background busier than the road (noise, photographs) shows it
    contrast_from: str = field(default="scene", metadata={"choices": CONTRAST_FROM})  # with a contrast input, the colour
    # it is measured from (CONTRAST_FROM): "scene", the scene's median colour (its dominant colour, the grass in a plain
    # scene, so that the road is the light band); "ahead", the median colour just in front of the car (AHEAD_ROWS,
    # AHEAD_COLS: the car's fixed place in the frame), what it drives on, so that the road is the dark band in any scene
    # where the car is on it, whatever the background: plain, noisy, photographed or recoloured
    contrast_jitter: float = field(default=0.0, metadata=between(0, 1, hi_open=True))  # training only, with contrast_from "ahead": the share of frames whose contrast is measured
    # from a patch of the same size at a random place in the scene instead (drawn per frame from torch's generator, as
    # dropout's masks are), mostly grass in a plain scene. A car drifting to the road's edge in a sharp bend has the patch
    # ahead on the grass before its wheels leave the road, and the contrast turns over; weak runs stop steering there
    # (docs/studies/contrast-reference/). Nothing in it knows which pixels are road
    strip_rows: int = 12  # the frame's bottom rows that hold the car's instruments (agents.carracing.render.STRIP_ROWS)
    target_speeds: tuple[float, float] = (20.0, 75.0)  # wheel_speed "target": the least and most the expert's target speed
    # can be (u/s; the discrete track expert's min_speed and max_speed, agents.experts.track.TrackExpertConfig)

    def __post_init__(self) -> None:
        check_ranges(self)
        need(self.head in HEADS, f"unknown head {self.head!r}; choose one of {', '.join(HEADS)}")
        need(self.action_space in ACTION_SPACES, f"action_space must be one of {', '.join(ACTION_SPACES)} (got {self.action_space!r})")
        need(not self.brake_gate or self.action_space == "continuous", "brake_gate is for continuous actions")
        need(not self.rate_window or self.action_space == "discrete", "rate_window is for discrete actions")
        need(not self.wheel_target or self.action_space == "discrete", "wheel_target is for discrete actions")
        need(not (self.wheel_target and self.rate_window), "choose one of wheel_target and rate_window")
        need(0 <= self.strip_rows < self.frame_size, f"strip_rows must be in [0, frame_size) (got {self.strip_rows})")
        need(not self.contrast_flip or self.frame_input in ("contrast", "rgb+contrast"),
             f"contrast_flip turns the contrast over (1 - c): it needs frame_input contrast or rgb+contrast (got {self.frame_input!r})")
        need(self.frame_input in FRAME_INPUTS, f"frame_input must be one of {', '.join(FRAME_INPUTS)} (got {self.frame_input!r})")
        need(self.contrast_from in CONTRAST_FROM, f"contrast_from must be one of {', '.join(CONTRAST_FROM)} (got {self.contrast_from!r})")
        need(not self.contrast_jitter or self.contrast_from == "ahead",
             f"contrast_jitter moves the patch the contrast is measured from: it needs contrast_from ahead (got {self.contrast_from!r})")
        need(self.contrast_from == "scene" or self.frame_input != "rgb",
             f"contrast_from is the colour a contrast input is measured from: it needs a frame_input with contrast (got {self.frame_input!r})")
        need(self.wheel_speed in WHEEL_SPEEDS, f"wheel_speed must be one of {', '.join(WHEEL_SPEEDS)} (got {self.wheel_speed!r})")
        need(self.wheel_speed == "excess" or self.wheel_target, "wheel_speed is for wheel-angle networks (wheel_target)")
        need(self.wheel_horizon == 1 or self.wheel_target, "wheel_horizon is for wheel-angle networks (wheel_target)")
        self.target_speeds = tuple(float(v) for v in self.target_speeds)  # type: ignore[assignment]  # config.json holds a list
        need(len(self.target_speeds) == 2 and 0 <= self.target_speeds[0] < self.target_speeds[1],
             f"target_speeds must be two speeds, the least below the most (got {self.target_speeds})")
        self.head_config()  # validate the head options now, with the head's own messages

    @property
    def outputs(self) -> int:
        if self.wheel_target:
            return 2
        return DISCRETE_ACTIONS if self.action_space == "discrete" else CONTINUOUS_ACTIONS + int(self.brake_gate)

    def speed_excess(self, out: Tensor, speed: Tensor | float) -> Tensor:
        """A wheel-angle network's speed excess (u/s) from its second output (raw) and the car's speed
        (u/s; unused for wheel_speed "excess"). Elementwise."""
        if self.wheel_speed == "excess":
            return self.excess_scale * out
        lo, hi = self.target_speeds
        return speed - (lo + (hi - lo) * torch.sigmoid(out))

    @property
    def span(self) -> int:
        """Steps from the window's first frame to its last, inclusive."""
        return (self.window - 1) * self.frame_stride + 1

    def head_config(self) -> HeadConfig:
        # Every head sees exactly the window, in training and in closed loop: attention heads
        # attend within it, recurrent heads rerun it from zero (see SequenceHead.forward).
        return HeadConfig(
            name=self.head,
            input_dim=cnn_features(self.frame_size),
            d_model=self.d_model,
            num_heads=self.num_heads,
            causal=True,
            window=self.window,
            nac=dict(self.nac) if self.head.startswith("nac") else {},
        )


def _conv_out(n: int, k: int, s: int) -> int:
    return (n - k) // s + 1


def cnn_features(frame_size: int) -> int:
    n = _conv_out(_conv_out(_conv_out(frame_size, 3, 2), 5, 2), 5, 2)
    return 30 * n * n


class DrivingNet(nn.Module):
    """frames (B, W, H, W, 3) uint8 [+ timestamps (B, W) seconds] -> action outputs (B, A).

    Discrete: logits over the 5 actions (with wheel_target: a wheel angle and a speed excess). Continuous: steer in (-1, 1) (tanh), gas and brake in
    (0, 1) (sigmoid); with brake_gate a fourth output is the logit of braking at all.
    """

    def __init__(self, config: DrivingNetConfig) -> None:
        super().__init__()
        self.config = config
        p = config.dropout
        self.cnn = nn.Sequential(
            nn.Conv2d(4 if config.frame_input.startswith("rgb+") else 3, 10, 3, stride=2), nn.ReLU(), Dropout(p),
            nn.Conv2d(10, 20, 5, stride=2), nn.ReLU(), Dropout(p),
            nn.Conv2d(20, 30, 5, stride=2), nn.ReLU(), Dropout(p),
            nn.Flatten(),
        )
        self.head: SequenceHead = build_head(config.head_config())
        self.mlp = nn.Sequential(nn.Linear(self.head.config.out_dim, config.hidden), nn.ReLU(), Dropout(p))
        self.out = nn.Linear(config.hidden, config.outputs)

    # The three stages are public so that training can encode each distinct frame once and
    # closed loop can keep past features in a ring buffer.
    def encode(self, frames: Tensor) -> Tensor:
        """(N, H, W, 3) uint8 -> (N, F) features."""
        return self.pixel_features(frames.permute(0, 3, 1, 2).float().div_(255.0))

    def pixel_features(self, x: Tensor) -> Tensor:
        """(N, 3, H, W) frames on 0..1 -> (N, F) features: what encode does after the conversion, for callers that take
        gradients with respect to the pixels (agents.figures.saliency)."""
        return self.cnn(self.see(x))

    def see(self, x: Tensor) -> Tensor:
        """(N, 3, H, W) frames on 0..1 -> what the CNN is given of them (DrivingNetConfig.frame_input): (N, 3, H, W),
        or (N, 4, H, W) for the frame and its contrast."""
        if self.config.frame_input == "rgb":
            return x
        rows = x.shape[2] - self.config.strip_rows
        scene = x[:, :, :rows]
        # the region whose median colour the contrast is measured from: the patch in front of the car, or the scene
        region = self.ahead_region(x, rows) if self.config.contrast_from == "ahead" else scene
        median = region.flatten(2).median(dim=2).values[..., None, None]  # (N, 3, 1, 1)
        # the colour distance on 0..1 (sqrt(3) the largest); eps keeps the gradient finite where a pixel is the median
        distance = ((scene - median).square().sum(1, keepdim=True) + 1e-8).sqrt() / math.sqrt(3.0)
        if self.training and self.config.contrast_flip:
            flip = torch.rand(len(x), 1, 1, 1, device=x.device) < self.config.contrast_flip
            distance = torch.where(flip, 1.0 - distance, distance)
        if self.config.frame_input.endswith("-scaled"):  # at least 0.01: a scene of one colour stays near 0
            distance = distance / distance.mean(dim=(2, 3), keepdim=True).clamp_min(0.01)
        if self.config.frame_input.startswith("rgb+"):  # the strip's contrast channel is 0: it reads by its colours
            return torch.cat([x, torch.cat([distance, torch.zeros_like(x[:, :1, rows:])], dim=2)], dim=1)
        return torch.cat([distance.expand(-1, 3, -1, -1), x[:, :, rows:]], dim=2)

    def ahead_region(self, x: Tensor, rows: int) -> Tensor:
        """(N, 3, h, w): the patch ahead of the car in each frame, or in training, for a contrast_jitter share of them, a patch
        of the same size at a random place in the scene's `rows` rows."""
        rs, cs = ahead_patch(x.shape[2])
        region = x[:, :, rs, cs]
        if not (self.training and self.config.contrast_jitter):
            return region
        moved = (torch.rand(len(x), device=x.device) < self.config.contrast_jitter).nonzero().flatten().tolist()
        if not moved:
            return region
        h, w = rs.stop - rs.start, cs.stop - cs.start
        tops = torch.randint(0, rows - h + 1, (len(moved),)).tolist()
        lefts = torch.randint(0, x.shape[3] - w + 1, (len(moved),)).tolist()
        region = region.clone()
        for i, top, left in zip(moved, tops, lefts):  # a few dozen frames a batch, each patch sliced on its own
            region[i] = x[i, :, top:top + h, left:left + w]
        return region

    def head_time(self, timestamps: Tensor | None) -> Tensor | None:
        """Seconds -> the head's time unit, or None for heads that take no time (or use_time off)."""
        if timestamps is None or not (self.config.use_time and self.head.accepts_time):
            return None
        return timestamps / self.config.time_unit

    def readout(self, h: Tensor) -> Tensor:
        """(..., head out) -> (..., A) raw outputs (logits, or pre-activations when continuous)."""
        return self.out(self.mlp(h))

    def embed(self, frames: Tensor) -> Tensor:
        """(N, H, W, 3) uint8 -> (N, E): each frame's features as the head takes them in (the CNN, then the
        head's map of each step alone, SequenceHead.embed_steps)."""
        return self.head.embed_steps(self.encode(frames))

    def decide(self, features: Tensor, timestamps: Tensor | None = None, embedded: bool = False) -> Tensor:
        """(B, W, F) window features [+ (B, W) seconds] -> (B, A) raw outputs; embedded: the features are
        embed()'s rather than encode()'s."""
        t = self.head_time(timestamps)
        return self.readout(self.head.over_steps(features, t) if embedded else self.head(features, t))

    def forward(self, frames: Tensor, timestamps: Tensor | None = None, index: Tensor | None = None,
                features: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """frames (B, W, H, W, 3) uint8 windows; or, with index (B, W), frames (N, H, W, 3) holds
        distinct frames and index picks each window's rows of it (so that windows that share
        frames encode and embed them once: a training batch of 32 windows of 8 frames holds
        about 60 distinct frames). features: also return each frame's embedded features (N, E), or (B, W, E)
        without index (a loss on them goes through the module's own call, as a distributed wrapper needs)."""
        if index is None:
            b, w = frames.shape[:2]
            per_frame = feats = self.embed(frames.reshape(b * w, *frames.shape[2:])).reshape(b, w, -1)
        else:
            per_frame = self.embed(frames)
            feats = per_frame[index]  # (B, W, E)
        out = self.decide(feats, timestamps, embedded=True)
        return (out, per_frame) if features else out

    def squash(self, raw: Tensor, driven: bool = True) -> Tensor:
        """Continuous outputs into the action (..., 3): steer tanh, gas / brake sigmoid. As driven,
        with brake_gate the brake is applied only where the gate's logit is positive; driven=False
        gives the outputs themselves, as training fits them."""
        action = torch.cat([torch.tanh(raw[..., :1]), torch.sigmoid(raw[..., 1:3])], -1)
        if driven and self.config.brake_gate:
            action = torch.cat([action[..., :2], action[..., 2:3] * (raw[..., 3:4] > 0)], -1)
        return action

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path, name: str = "model", extra: dict[str, Any] | None = None) -> None:
        save_checkpoint(directory, {"task": TASK, "net": self.config.to_dict(), **(extra or {})}, self.state_dict(), name)

    @classmethod
    def load(cls, directory: str | Path, name: str = "model", map_location: str = "cpu") -> "DrivingNet":
        """Rebuild from config.json + <name>.safetensors alone (no code is executed from them)."""
        config, state = load_checkpoint(directory, map_location, name)
        return cls.from_checkpoint(config, state, directory)

    @classmethod
    def from_checkpoint(cls, config: dict[str, Any], state: dict[str, Tensor], source: str | Path) -> "DrivingNet":
        if config.get("task") != TASK or "net" not in config:
            raise ConfigError(
                f"{source} is not a CarRacing driving run (its config.json has task {config.get('task')!r}, "
                f"expected {TASK!r})"
            )
        try:
            net_config = DrivingNetConfig.from_dict(config["net"])
        except ConfigError as exc:
            raise ConfigError(f"{Path(source) / 'config.json'}: {exc}. It was written by another version of nac-drive: drive it "
                              "with that version, or train it again with this one") from None
        return build_loaded(lambda: cls(net_config), state, source)
