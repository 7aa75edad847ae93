"""Generic image augmentations for behaviour cloning, against visual shift: each picks its random
draws per chunk of consecutive steps (a window's frames change together, as they would in a shifted
world) and changes only the scene above the instrument strip (the car's own instruments, which the
policy reads, look the same in every scenario of agents.carracing.scenarios).

- `jitter`: colour jitter: brightness, contrast and saturation each scaled by a factor in
  [1 - JITTER, 1 + JITTER], the hue turned by up to HUE_TURN of a full turn.
- `randconv`: random convolution (Lee et al. 2020, "Network Randomization"): a 3 x 3 convolution
  from RGB to RGB with fresh Xavier-normal weights.
- `randmix`: random convolution with Lee et al.'s weights mixed with the identity, alpha * identity + (1 - alpha) *
  Xavier with alpha drawn from U(0, 1) per chunk (RandConv's mixing, Xu et al. 2021): from barely changed to fully
  random. Lee et al.'s other two parts are the recipe's `consistency` (agents.training.bc: their feature matching)
  and the network's `drive_average` (agents.driving.views: the readouts averaged over several random networks when it
  drives).
- `colour`: a random affine colour transform of the whole scene, one per chunk: x -> A x + b with
  A = alpha * identity + (1 - alpha) * R, R's entries from N(0, 1/3), alpha from U(0, 1), b from U(-0.5, 0.5)^3, then
  each frame's scene stretched back to 0..1 by its own lowest and highest value (the same for every pixel: no pixel
  is told from another by what it shows).
- `overlay`: the frame blended half and half with an unrelated picture (SODA / SVEA, Hansen et
  al. 2021, overlay natural images; none can be downloaded here, so the pictures are random
  colour images with a natural image's 1/f amplitude spectrum, as in Baradad et al. 2021).
- `natural`: the same blend with a crop of a real photograph (SODA's natural images): one of NATURAL, photographs and
  textures that ship inside scikit-image's wheel and are none of the `photos` scenario's (agents.carracing.scenarios
  PHOTOS), so that no test scene is shown in training; the crop's side from 20 % to all of the picture's shorter side,
  its place drawn, stretched over the scene.
- `patch`: the same crops at full strength where a smooth random mask says so: the mask is a MASK_GRID x MASK_GRID grid
  of U(0, 1) values, upsampled bilinearly and sharpened to 0..1, so that a frame shows regions of the photograph alone
  (nothing of the frame left under them, the road included) beside regions of the frame alone, as a background
  replaced outright shows them; the mask knows nothing of what a pixel shows.
- `invert`: the scene's every value turned over (x -> 1 - x, torchvision's RandomInvert) in INVERT_SHARE of the chunks
  it is given, the others left: a road that was darker than its grass becomes lighter, as gymnasium's domain
  randomization shows it on some tracks (docs/studies/augment-runs/, the luminance gap); whole frames, so it knows
  nothing of which pixels are road.

Kinds combine with "+" ("randmix+overlay"): a picked chunk gets each in turn, in the order given.
Each chunk is augmented with probability SHARE, the others stay clean (SVEA trains on both);
`augment(..., share=1.0)` augments every chunk (the augmented view of the consistency loss).
Written here: no library draws augmentations per group of frames (kornia and torchvision draw per
image), and the three are a few lines each on tensors.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from agents.driving.views import SCENE_ROWS, convolve, randconv_weights

AUGMENTS = ("none", "jitter", "randconv", "randmix", "colour", "overlay", "natural", "patch", "invert")
SHARE = 0.5  # of chunks augmented
JITTER = 0.4  # jitter: brightness, contrast, saturation factors in [1 - JITTER, 1 + JITTER]
HUE_TURN = 0.1  # jitter: the hue turned by up to this share of a full turn
OVERLAY = 0.5  # overlay: the picture's weight in the blend (SODA's alpha)
_GREY = torch.tensor([0.299, 0.587, 0.114])  # luma weights
# natural: skimage.data's pictures that the photos scenario does not use (colour ones, and grey textures as grey RGB)
NATURAL = ("immunohistochemistry", "retina", "stereo_motorcycle", "brick", "grass", "gravel", "camera", "coins", "moon")
NATURAL_CROP = (0.2, 1.0)  # natural: a crop's side, as a share of the picture's shorter side
INVERT_SHARE = 0.5  # invert: of the chunks it is given (so a quarter of all chunks alone, at SHARE 0.5)
MASK_GRID = 4  # patch: the mask's coarse grid, cells a side
MASK_SHARPNESS = 4.0  # patch: the mask's slope about 0.5 (1: as drawn, larger: harder edges)


def kinds(kind: str) -> list[str]:
    """The augmentations of a (combined) kind, in their order ([] for "none")."""
    return [] if kind == "none" else kind.split("+")


def check_augment(kind: str) -> None:
    from nac.config import need

    parts = kind.split("+")
    need(all(p in AUGMENTS for p in parts) and (kind == "none" or "none" not in parts) and len(set(parts)) == len(parts),
         f"augment must be one of {', '.join(AUGMENTS)}, or several of them joined by '+' (got {kind!r})")


def augment(frames: Tensor, chunk: np.ndarray, kind: str, rng: np.random.Generator, share: float = SHARE) -> Tensor:
    """frames (U, H, W, 3) uint8, chunk (U,) the chunk of each frame -> the frames augmented, uint8: each chunk with
    probability `share`, by every augmentation of `kind` in turn."""
    if kind == "none":
        return frames
    n = int(chunk.max()) + 1
    picked = rng.random(n) < share
    if not picked.any():
        return frames
    rows = torch.from_numpy(np.flatnonzero(picked[chunk])).to(frames.device)
    which = chunk[picked[chunk]]  # the chunk of each picked frame
    out = frames[rows, :SCENE_ROWS].float() / 255  # (u, h, w, 3)
    for k in kinds(kind):
        out = _KINDS[k](out, which, n, rng).clamp(0, 1)
    frames = frames.clone()
    frames[rows, :SCENE_ROWS] = (out * 255).round().to(torch.uint8)
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
    return convolve(x, randconv_weights(n, rng, mixed=False)[which])


def _randmix(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    return convolve(x, randconv_weights(n, rng, mixed=True)[which])


def colour_maps(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n random affine colour maps: A (n, 3, 3) = alpha * I + (1 - alpha) * R, b (n, 3) (see `colour`)."""
    alpha = rng.uniform(0, 1, n)[:, None, None]
    a = alpha * np.eye(3) + (1 - alpha) * rng.normal(0, 1 / math.sqrt(3), (n, 3, 3))
    return a, rng.uniform(-0.5, 0.5, (n, 3))


def _colour(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    a, b = colour_maps(n, rng)
    y = torch.einsum("uhwc,udc->uhwd", x, torch.as_tensor(a[which], dtype=x.dtype, device=x.device))
    y = y + _per_chunk(b, which, x)
    lo, hi = y.amin(dim=(1, 2, 3), keepdim=True), y.amax(dim=(1, 2, 3), keepdim=True)
    return (y - lo) / (hi - lo).clamp_min(1e-6)


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


@functools.cache
def natural_picture(name: str) -> np.ndarray:
    """One of NATURAL as an (h, w, 3) uint8 picture, read from scikit-image's own wheel (nothing downloaded)."""
    import skimage.data  # the natural augmentation's dependency alone: imported when it is drawn

    image = getattr(skimage.data, name)()
    image = image[0] if isinstance(image, tuple) else image  # stereo_motorcycle: (left, right, disparity)
    image = np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image[..., :3]
    return np.ascontiguousarray(image, dtype=np.uint8)


def natural_crops(n: int, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """n crops (n, h, w, 3) in 0..1 of pictures of NATURAL: a picture, a crop's side and its place drawn per crop."""
    import cv2

    out = np.empty((n, h, w, 3), np.float32)
    for i in range(n):
        pic = natural_picture(NATURAL[rng.integers(len(NATURAL))])
        side = max(8, int(rng.uniform(*NATURAL_CROP) * min(pic.shape[:2])))
        y, x = rng.integers(0, pic.shape[0] - side + 1), rng.integers(0, pic.shape[1] - side + 1)
        out[i] = cv2.resize(pic[y : y + side, x : x + side], (w, h), interpolation=cv2.INTER_AREA) / 255.0
    return out


def _crops_per_frame(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    """natural_crops drawn per chunk, as (u, h, w, 3) beside x's frames (natural, patch)."""
    return torch.as_tensor(natural_crops(n, x.shape[1], x.shape[2], rng)[which], dtype=x.dtype, device=x.device)


def _natural(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    return (1 - OVERLAY) * x + OVERLAY * _crops_per_frame(x, which, n, rng)


def patch_masks(n: int, h: int, w: int, rng: np.random.Generator) -> Tensor:
    """n smooth random masks (n, h, w, 1) in 0..1 (see `patch`): a coarse grid of U(0, 1), upsampled, sharpened."""
    coarse = torch.as_tensor(rng.uniform(0, 1, (n, 1, MASK_GRID, MASK_GRID)), dtype=torch.float32)
    m = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=True)
    return ((m - 0.5) * MASK_SHARPNESS + 0.5).clamp(0, 1).permute(0, 2, 3, 1)


def _patch(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    pics = _crops_per_frame(x, which, n, rng)
    m = patch_masks(n, x.shape[1], x.shape[2], rng)[torch.as_tensor(which)].to(device=x.device, dtype=x.dtype)
    return (1 - m) * x + m * pics


def _invert(x: Tensor, which: np.ndarray, n: int, rng: np.random.Generator) -> Tensor:
    flip = _per_chunk((rng.random(n) < INVERT_SHARE).astype(np.float32), which, x)[..., None]  # (u, 1, 1, 1): 1 where inverted
    return flip * (1 - x) + (1 - flip) * x


_KINDS = {"jitter": _jitter, "randconv": _randconv, "randmix": _randmix, "colour": _colour, "overlay": _overlay,
          "natural": _natural, "patch": _patch, "invert": _invert}
