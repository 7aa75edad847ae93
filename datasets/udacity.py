"""Udacity self-driving-car simulator recordings (`driving_log.csv` + `IMG/`), PilotNet
preprocessing and augmentation, a torch Dataset, and splits by recording session.

Both CSV forms are read: the simulator's own (no header, absolute paths, maybe Windows
backslashes, ", " between fields) and Udacity's sample (a header, relative paths). An image path
that does not exist is looked up next to the CSV (as given, then by file name under IMG/). Rows
whose images are missing or do not decode are reported (how many, which) and skipped at load
time, so an epoch never meets a broken file.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PureWindowsPath
from typing import Sequence

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from datasets.demos import DataError
from nac.checkpoint import read_json

LOG = "driving_log.csv"
COLUMNS = ("center", "left", "right", "steering", "throttle", "brake", "speed")
CAMERAS = ("center", "left", "right")
SIDE_OFFSET = {"center": 0.0, "left": 0.2, "right": -0.2}  # steering correction per camera (PilotNet practice)
CROP = (60, -25)  # rows kept: sky above, bonnet below removed
SIZE = (200, 66)  # PilotNet input, width x height
SHIFT_PER_PIXEL = 0.002  # steering change per pixel of horizontal translation
SESSION_GAP_S = 2.0  # a pause longer than this between frames starts a new recording session
_STAMP = re.compile(r"(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{3})")


@dataclass
class Sample:
    images: dict[str, bytes]  # camera -> JPEG bytes (centre always; sides when present)
    steering: float  # normalised to [-1, 1]
    throttle: float
    brake: float
    speed: float  # mph
    session: str  # recording session id ("<csv folder>#<n>")
    time: float | None  # seconds, from the file name's timestamp


@dataclass
class Recording:
    """The usable rows of one or more driving logs, and what was skipped."""

    samples: list[Sample]
    skipped: list[tuple[str, int, str]] = field(default_factory=list)  # (csv, row number, why)

    def sessions(self) -> list[str]:
        return sorted({s.session for s in self.samples})

    def report(self) -> str:
        if not self.skipped:
            return f"{len(self.samples)} rows, {len(self.sessions())} session(s), none skipped"
        first = "; ".join(f"{Path(c).name} row {n}: {why}" for c, n, why in self.skipped[:3])
        return f"{len(self.samples)} rows, {len(self.sessions())} session(s); skipped {len(self.skipped)} rows ({first}{' ...' if len(self.skipped) > 3 else ''})"


def resolve_config(raw: str, folder: Path) -> Path | None:
    raw = raw.strip()
    if not raw:
        return None
    for candidate in (Path(raw), folder / raw.replace("\\", "/"), folder / "IMG" / PureWindowsPath(raw).name):
        if candidate.is_file():
            return candidate
    return None


def _number(text: str) -> float:
    return float(text.strip().replace(",", "."))


def _stamp(path: str) -> float | None:
    m = _STAMP.search(PureWindowsPath(path).name)
    if not m:
        return None
    y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, s, ms * 1000).timestamp()


def read_log(path: str | Path) -> Recording:
    """One driving_log.csv (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / LOG
    if not p.is_file():
        raise DataError(f"{p} not found: a Udacity recording is a folder with {LOG} and IMG/")
    folder = p.parent
    samples, skipped = [], []
    with open(p, newline="", encoding="utf-8-sig") as f:
        text = f.read()
    torn = bool(text) and not text.endswith(("\n", "\r"))  # a recording killed mid-row: its last line has no line end
    rows = list(csv.reader(text.splitlines(keepends=True), skipinitialspace=True))
    if rows and rows[0] and rows[0][0].strip().lower() == "center":
        start = 1  # Udacity's sample data has a header
    else:
        start = 0
    session, last_t = 0, None
    for n, row in enumerate(rows[start:], start=start + 1):
        if not row or all(not c.strip() for c in row):
            continue
        if torn and n == len(rows):  # its last field may be cut short and still parse (a speed of 12.3 for 12.3456)
            skipped.append((str(p), n, "the last row is cut short (no line end): the recording was interrupted"))
            continue
        if len(row) < len(COLUMNS):
            skipped.append((str(p), n, f"{len(row)} fields, expected {len(COLUMNS)}"))
            continue
        try:
            steering, throttle, brake, speed = (_number(v) for v in row[3:7])
        except ValueError:
            skipped.append((str(p), n, "a number field does not parse"))
            continue
        images, why = {}, None
        for cam, raw in zip(CAMERAS, row[:3]):
            resolved = resolve_config(raw, folder)
            if resolved is None:
                if cam == "center":
                    why = f"image {PureWindowsPath(raw.strip()).name or '(empty)'} not found"
                continue
            data = resolved.read_bytes()
            # a JPEG cut short still decodes (libjpeg fills the rest grey): one that lacks its end marker is broken
            cut = data[:2] == b"\xff\xd8" and not data.rstrip(b"\0")[-2:] == b"\xff\xd9"
            if cut or cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is None:
                if cam == "center":
                    why = f"image {resolved.name} does not decode"
                continue
            images[cam] = data
        if why:
            skipped.append((str(p), n, why))
            continue
        t = _stamp(row[0])
        if t is not None and last_t is not None and t - last_t > SESSION_GAP_S:
            session += 1
        last_t = t if t is not None else last_t
        samples.append(Sample(images, float(np.clip(steering, -1, 1)), throttle, brake, speed, f"{folder}#{session}", t))
    if not samples:
        raise DataError(f"{p} has no usable rows" + (f" (skipped {len(skipped)}: {skipped[0][2]})" if skipped else ""))
    return Recording(samples, skipped)


def read_logs(paths: Sequence[str | Path]) -> Recording:
    recs = [read_log(p) for p in paths]
    return Recording([s for r in recs for s in r.samples], [k for r in recs for k in r.skipped])


def split_by_session(rec: Recording, val_fraction: float = 0.2, seed: int = 0, blocks: int = 10) -> tuple[list[int], list[int]]:
    """Train / validation row indices. With two or more sessions, whole sessions go to one side;
    with one, it is cut into `blocks` contiguous stretches and whole stretches are held out, so
    neighbouring (nearly identical) frames do not land on both sides."""
    if not 0 < val_fraction < 1:
        raise DataError(f"validation fraction must be between 0 and 1 (got {val_fraction})")
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(rec.samples):
        groups.setdefault(s.session, []).append(i)
    if len(groups) < 2:
        idx = np.arange(len(rec.samples))
        parts = [p.tolist() for p in np.array_split(idx, min(blocks, len(idx)))]
        groups = {f"block{k}": p for k, p in enumerate(parts)}
    keys = list(np.random.default_rng(seed).permutation(sorted(groups)))
    n_val = min(len(keys) - 1, max(1, round(val_fraction * len(keys))))
    val = sorted(i for k in keys[:n_val] for i in groups[k])
    train = sorted(i for k in keys[n_val:] for i in groups[k])
    return train, val


SEEDS_FILE = "sim_seeds.json"  # beside a stand-in recording's driving_log.csv: the tracks it drove, never evaluation tracks


def recorded_seeds(folders: Sequence[str | Path]) -> list[int]:
    """The tracks the stand-in recorded into these folders (their sim_seeds.json); none for the real simulator's."""
    seeds: set[int] = set()
    for f in folders:
        p = Path(f) / SEEDS_FILE
        if p.is_file():
            seeds.update(int(s) for s in read_json(p).get("seeds", []))
    return sorted(seeds)


# ---------------------------------------------------------------------- PilotNet preprocessing
def decode(data: bytes) -> np.ndarray:
    """JPEG bytes -> (H, W, 3) RGB uint8."""
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """(160, 320, 3) RGB -> (66, 200, 3) YUV uint8: crop sky and bonnet, resize, convert."""
    crop = rgb[CROP[0] : rgb.shape[0] + CROP[1]]
    small = cv2.resize(crop, SIZE, interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(small, cv2.COLOR_RGB2YUV)


def augment(rgb: np.ndarray, steering: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Flip, translate, shadow and brightness (OpenCV), deterministic under rng."""
    h, w = rgb.shape[:2]
    img = rgb
    if rng.random() < 0.5:
        img, steering = cv2.flip(img, 1), -steering
    tx, ty = rng.uniform(-50, 50), rng.uniform(-10, 10)
    img = cv2.warpAffine(img, np.float32([[1, 0, tx], [0, 1, ty]]), (w, h), borderMode=cv2.BORDER_REPLICATE)
    steering += tx * SHIFT_PER_PIXEL
    if rng.random() < 0.5:  # a shadow: the image darkened on one side of a random line
        x1, x2 = rng.uniform(0, w, 2)
        ys, xs = np.mgrid[0:h, 0:w]
        side = (xs - x1) * h - (x2 - x1) * ys > 0
        hls = cv2.cvtColor(img, cv2.COLOR_RGB2HLS)
        hls[..., 1] = np.where(side, hls[..., 1] * rng.uniform(0.4, 0.8), hls[..., 1]).astype(np.uint8)
        img = cv2.cvtColor(hls, cv2.COLOR_HLS2RGB)
    hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
    hsv[..., 2] = np.clip(hsv[..., 2] * rng.uniform(0.6, 1.3), 0, 255).astype(np.uint8)
    img = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    return img, float(np.clip(steering, -1, 1))


class UdacityDataset(Dataset):
    """Item: {"image": (3, 66, 200) uint8 YUV, "steering": float, "speed": mph}. Training items pick a camera
    (sides with the steering offset) and augment; the draw depends only on (seed, epoch, index)."""

    def __init__(self, rec: Recording, indices: Sequence[int], train: bool, seed: int = 0) -> None:
        self.rec, self.indices, self.train, self.seed = rec, list(indices), train, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices)

    def item(self, i: int, rng: np.random.Generator | None) -> tuple[np.ndarray, float]:
        s = self.rec.samples[self.indices[i]]
        cam = "center"
        if rng is not None:
            cams = [c for c in CAMERAS if c in s.images]
            cam = cams[int(rng.integers(len(cams)))]
        rgb, steering = decode(s.images[cam]), s.steering + SIDE_OFFSET[cam]
        if rng is not None:
            rgb, steering = augment(rgb, steering, rng)
        return preprocess(rgb), float(np.clip(steering, -1, 1))

    def arrays(self, i: int) -> dict[str, np.ndarray]:
        """Item i as numpy arrays: "image" (3, 66, 200) uint8, "steering" and "speed" float32 scalars."""
        rng = np.random.default_rng([self.seed, self.epoch, i]) if self.train else None
        img, steering = self.item(i, rng)
        return {"image": np.ascontiguousarray(img.transpose(2, 0, 1)), "steering": np.float32(steering),
                "speed": np.float32(self.rec.samples[self.indices[i]].speed)}

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(np.asarray(v)) for k, v in self.arrays(i).items()}
