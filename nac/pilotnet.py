"""PilotNet (Bojarski et al. 2016) for the Udacity simulator, with a sequence head from the
registry in place of its dense layers: the head reads the last convolution's feature map as a
sequence of its 18 column positions (64 features each, plus a learned embedding of the column),
and the mean of its outputs gives the steering angle. PilotNet-NAC uses NAC with d_model 100 and
20 heads. head="dense" is PilotNet as published, its own dense layers (1152-100-50-10-1) on the
flattened map: the paper's baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from nac.heads import HEADS, HeadConfig, SequenceHead, build_head
from nac.config import ConfigDict, ConfigError, at_least, between, check_ranges, need
from nac.checkpoint import build_loaded, load_checkpoint, save_checkpoint

TASK = "udacity"
MAP_COLUMNS, MAP_CHANNELS = 18, 64  # the last convolution's output is 64 x 1 x 18
DENSE = "dense"  # PilotNet's own dense layers instead of a registry head
SPEED_MAX = 40.0  # mph: a predicted speed lies in (0, SPEED_MAX) (the simulator's top speed is about 30)
DENSE_LAYERS = (100, 50, 10)


@dataclass
class PilotNetConfig(ConfigDict):
    """Everything needed to rebuild a PilotNet (saved as config.json beside its weights)."""

    WHAT: ClassVar[str] = "PilotNet options"

    head: str = "nac"  # sequence head over the feature map's columns (nac.heads.head_names()), or "dense"
    d_model: int = field(default=100, metadata=at_least(1))
    num_heads: int = field(default=20, metadata=at_least(1))
    nac: dict[str, Any] = field(default_factory=dict)
    dropout: float = field(default=0.2, metadata=between(0, 1, hi_open=True))
    speed_output: bool = False  # also predict the recorded speed of each frame (a learned speed target for the bridge:
    # the recording's driver slows before a bend, which a controller reacting to the steering cannot)
    positions: bool = True  # a registry head: add a learned embedding of each column's position to its features. Without
    # it, attention (NAC, MHA) and the mean over columns are blind to where a feature lies: a road to the left of the car
    # reads as one to its right, except at the image's edges (the convolutions have no padding). Runs saved before this
    # option have none (PilotNet.from_checkpoint)

    def __post_init__(self) -> None:
        check_ranges(self)
        need(self.head in HEADS or self.head == DENSE, f"unknown head {self.head!r}; choose one of {DENSE}, {', '.join(HEADS)}")
        if self.head != DENSE:
            self.head_config()

    def head_config(self) -> HeadConfig:
        # positions of a feature map have no order in time: attention heads see all of them
        return HeadConfig(
            name=self.head, input_dim=MAP_CHANNELS, d_model=self.d_model, num_heads=self.num_heads,
            return_sequences=True, nac=dict(self.nac) if self.head.startswith("nac") else {},
        )


class PilotNet(nn.Module):
    """images (B, 3, 66, 200) uint8 YUV -> steering (B,) in [-1, 1]."""

    def __init__(self, config: PilotNetConfig) -> None:
        super().__init__()
        self.config = config
        elu = nn.ELU
        self.cnn = nn.Sequential(
            nn.Conv2d(3, 24, 5, stride=2), elu(),
            nn.Conv2d(24, 36, 5, stride=2), elu(),
            nn.Conv2d(36, 48, 5, stride=2), elu(),
            nn.Conv2d(48, 64, 3), elu(),
            nn.Conv2d(64, 64, 3), elu(),
            nn.Dropout(config.dropout),
        )
        self.head: SequenceHead | None = None
        if config.head == DENSE:
            sizes = (MAP_CHANNELS * MAP_COLUMNS, *DENSE_LAYERS)
            self.dense = nn.Sequential(*[m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), elu())])
        else:
            self.head = build_head(config.head_config())
            if config.positions:  # ViT's learned position embedding (Dosovitskiy et al. 2021), one per column
                self.positions = nn.Parameter(torch.randn(MAP_COLUMNS, MAP_CHANNELS) * 0.02)
        self.out = nn.Linear(DENSE_LAYERS[-1] if self.head is None else self.head.config.out_dim, 2 if config.speed_output else 1)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor | None]:
        """Steering (B,) in (-1, 1), and with speed_output the speed (B,) in mph, else None. Training calls it
        through DistributedDataParallel's forward, whose hooks synchronise the gradients."""
        x = images.float() / 127.5 - 1.0  # PilotNet's normalisation layer
        out = self.out(self.read_map(self.cnn(x)))
        speed = torch.sigmoid(out[:, 1]) * SPEED_MAX if self.config.speed_output else None
        return torch.tanh(out[:, 0]), speed

    def read_map(self, fmap: Tensor) -> Tensor:
        """The last convolution's map (B, 64, 1, 18) -> features (B, 10 or d_model) for the output layer."""
        if self.head is None:
            return self.dense(fmap.flatten(1))
        tokens = fmap.flatten(2).transpose(1, 2)  # (B, 18, 64): one token per column
        if self.config.positions:
            tokens = tokens + self.positions
        return self.head(tokens).mean(1)

    def save(self, directory: str | Path, name: str = "model", extra: dict[str, Any] | None = None) -> None:
        save_checkpoint(directory, {"task": TASK, "net": self.config.to_dict(), **(extra or {})}, self.state_dict(), name)

    @classmethod
    def from_checkpoint(cls, config: dict[str, Any], state: dict[str, Tensor], source: str | Path) -> "PilotNet":
        if config.get("task") != TASK or "net" not in config:
            raise ConfigError(f"{source} is not a Udacity (PilotNet) run (its config.json has task {config.get('task')!r})")
        # saved before positions existed: none
        return build_loaded(lambda: cls(PilotNetConfig.from_dict({"positions": False, **config["net"]})), state, source)

    @classmethod
    def load(cls, directory: str | Path, name: str = "best", map_location: str = "cpu") -> "PilotNet":
        config, state = load_checkpoint(directory, map_location, name)
        return cls.from_checkpoint(config, state, directory)
