"""Random convolutions (Lee et al. 2020, "Network Randomization"): their weights, a frame seen through one, and the
views a policy averages its actions over at drive time (Lee et al.'s Monte Carlo approximation of the policy over random
networks, DrivingNetConfig.drive_average). Training's augmentations (agents.training.augment) draw from the same
weights. Written here: no library draws a random convolution per frame as a group of frames needs it."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from agents.carracing.render import FRAME, STRIP_ROWS

VIEWS_SEED = 61_003  # the drive-time views' random convolutions come from (VIEWS_SEED, the episode's seed)
SCENE_ROWS = FRAME - STRIP_ROWS  # rows above the instrument strip: the car's own instruments are never changed
XAVIER_STD = math.sqrt(2.0 / (3 * 9 + 3 * 9))  # Xavier normal for a 3 x 3 conv, 3 channels in and out
IDENTITY = np.zeros((3, 3, 3, 3))
IDENTITY[[0, 1, 2], [0, 1, 2], 1, 1] = 1.0  # (out, in, 3, 3): each channel to itself, at the centre tap


def randconv_weights(n: int, rng: np.random.Generator, mixed: bool) -> np.ndarray:
    """(n, 3, 3, 3, 3) random convolutions: Xavier-normal, or (mixed) alpha * identity + (1 - alpha) * Xavier-normal
    with alpha from U(0, 1) for each."""
    w = rng.normal(0, XAVIER_STD, (n, 3, 3, 3, 3))
    if not mixed:
        return w
    alpha = rng.uniform(0, 1, n)[:, None, None, None, None]
    return alpha * IDENTITY + (1 - alpha) * w


def convolve(x: Tensor, weights: np.ndarray | Tensor) -> Tensor:
    """Each frame of x (u, h, w, 3) by its own 3 x 3 convolution, weights (u, 3, 3, 3, 3) (out, in, kh, kw)."""
    w = torch.as_tensor(weights, dtype=x.dtype, device=x.device)
    u, h, wd, _ = x.shape
    img = x.permute(0, 3, 1, 2).reshape(1, u * 3, h, wd)  # every frame a group of three channels
    out = torch.nn.functional.conv2d(img, w.reshape(u * 3, 3, 3, 3), padding=1, groups=u)
    return out.reshape(u, 3, h, wd).permute(0, 2, 3, 1)


def seen_through(frames: Tensor, weights: np.ndarray | Tensor) -> Tensor:
    """frames (n, H, W, 3) uint8, each seen through its own random convolution (n, 3, 3, 3, 3) above the instrument
    strip -> uint8, as training's augmentations store them."""
    out = frames.clone()
    scene = frames[:, :SCENE_ROWS].float() / 255
    out[:, :SCENE_ROWS] = (convolve(scene, weights).clamp(0, 1) * 255).round().to(torch.uint8)
    return out
