"""Generic image augmentations for behaviour cloning, against visual shift: each picks its random
draws per chunk of consecutive steps (a window's frames change together, as they would in a shifted
world) and changes only the scene above the instrument strip (the car's own instruments, which the
policy reads, look the same in every scenario of agents.carracing.scenarios).

- `jitter`: colour jitter: brightness, contrast and saturation each scaled by a factor in
  [1 - JITTER, 1 + JITTER], the hue turned by up to HUE_TURN of a full turn.
- `randconv`: random convolution (Lee et al. 2020, "Network Randomization"): a 3 x 3 convolution
  from RGB to RGB with fresh Xavier-normal weights.
- `overlay`: the frame blended half and half with an unrelated picture (SODA / SVEA, Hansen et
  al. 2021, overlay natural images; none can be downloaded here, so the pictures are random
  colour images with a natural image's 1/f amplitude spectrum, as in Baradad et al. 2021).

Each chunk is augmented with probability SHARE, the others stay clean (SVEA trains on both).
Written here: no library draws augmentations per group of frames (kornia and torchvision draw per
image), and the three are a few lines each on tensors.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from agents.carracing.render import FRAME, STRIP_ROWS

AUGMENTS = ("none", "jitter", "randconv", "overlay")
SHARE = 0.5  # of chunks augmented
JITTER = 0.4  # jitter: brightness, contrast, saturation factors in [1 - JITTER, 1 + JITTER]
HUE_TURN = 0.1  # jitter: the hue turned by up to this share of a full turn
OVERLAY = 0.5  # overlay: the picture's weight in the blend (SODA's alpha)
SCENE_ROWS = FRAME - STRIP_ROWS  # rows above the instrument strip
_GREY = torch.tensor([0.299, 0.587, 0.114])  # luma weights


def check_augment(kind: str) -> None:
    from nac.config import need

    need(kind in AUGMENTS, f"augment must be one of {', '.join(AUGMENTS)} (got {kind!r})")


def augment(frames: Tensor, chunk: np.ndarray, kind: str, rng: np.random.Generator) -> Tensor:
    """frames (U, H, W, 3) uint8, chunk (U,) the chunk of each frame -> the frames augmented, uint8."""
    if kind == "none":
        return frames
    n = int(chunk.max()) + 1
    picked = rng.random(n) < SHARE
    if not picked.any():
        return frames
    rows = torch.from_numpy(np.flatnonzero(picked[chunk])).to(frames.device)
    which = chunk[picked[chunk]]  # the chunk of each picked frame
    scene = frames[rows, :SCENE_ROWS].float() / 255  # (u, h, w, 3)
    if kind == "jitter":
        out = _jitter(scene, which, n, rng)
    elif kind == "randconv":
        out = _randconv(scene, which, n, rng)
    elif kind == "overlay":
        out = _overlay(scene, which, n, rng)
    else:
        raise ValueError(f"unknown augmentation {kind!r}")
    frames = frames.clone()
    frames[rows, :SCENE_ROWS] = (out.clamp(0, 1) * 255).round().to(torch.uint8)
    return frames


def _per_chunk(values: np.ndarray, which: np.ndarray, like: Tensor) -> Tensor:
    """values (n, ...) drawn per chunk -> (u, 1, 1, ...) per frame, for broadcasting over (u, h, w, ...)."""
    t = torch.as_tensor(values[which], dtype=like.dtype, device=like.device)
    return t.reshape(t.shape[0], 1, 1, *t.shape[1:])


def _jitter(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    b, c, s = (_per_chunk(rng.uniform(1 - JITTER, 1 + JITTER, n), which, x)[..., None] for _ in range(3))
    luma = _GREY.to(x.device)
    mean = (x * luma).sum(-1, keepdim=True).mean(dim=(1, 2), keepdim=True) * b  # (u, 1, 1, 1): each frame's mean grey, brightened
    x = (x * b - mean) * c + mean
    grey = (x * luma).sum(-1, keepdim=True)
    x = grey + (x - grey) * s
    # the hue: a rotation about the grey axis of RGB space (Rodrigues' formula)
    theta = rng.uniform(-HUE_TURN, HUE_TURN, n) * 2 * math.pi
    k = np.ones(3) / math.sqrt(3)
    cross = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    rot = np.stack([np.eye(3) * math.cos(t) + math.sin(t) * cross + (1 - math.cos(t)) * np.outer(k, k) for t in theta])  # (n, 3, 3)
    r = torch.as_tensor(rot[which], dtype=x.dtype, device=x.device)  # (u, 3, 3)
    return torch.einsum("uhwc,udc->uhwd", x, r)


def _randconv(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    std = math.sqrt(2.0 / (3 * 9 + 3 * 9))  # Xavier normal for a 3 x 3 conv, 3 channels in and out
    w = torch.as_tensor(rng.normal(0, std, (n, 3, 3, 3, 3))[which], dtype=x.dtype, device=x.device)  # (u, out, in, 3, 3)
    u, h, wd, _ = x.shape
    img = x.permute(0, 3, 1, 2).reshape(1, u * 3, h, wd)  # every frame a group of three channels
    out = torch.nn.functional.conv2d(img, w.reshape(u * 3, 3, 3, 3), padding=1, groups=u)
    return out.reshape(u, 3, h, wd).permute(0, 2, 3, 1)


def pink_pictures(n: int, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """n random colour pictures (n, h, w, 3) in 0..1 whose amplitude spectrum falls as 1/f, as a
    natural image's does: blobs and edges at every scale, nothing of a road or a car."""
    fy, fx = np.fft.fftfreq(h)[:, None], np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fy**2 + fx**2)
    f[0, 0] = 1.0
    phase = rng.uniform(0, 2 * math.pi, (n, 3, h, w // 2 + 1))
    pic = np.fft.irfft2(np.exp(1j * phase) / f, s=(h, w))  # (n, 3, h, w)
    lo, hi = pic.min(axis=(2, 3), keepdims=True), pic.max(axis=(2, 3), keepdims=True)
    return ((pic - lo) / (hi - lo)).transpose(0, 2, 3, 1)


def _overlay(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    pics = torch.as_tensor(pink_pictures(n, x.shape[1], x.shape[2], rng)[which], dtype=x.dtype, device=x.device)
    return (1 - OVERLAY) * x + OVERLAY * pics
