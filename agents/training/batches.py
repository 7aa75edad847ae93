"""The batches behaviour cloning trains on: demonstration sets loaded, windows drawn in chunks of consecutive steps
that share their frames, and the random image shifts of a chunk."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from datasets.demos import DataError, DemoSet, Episode, read_episode
from datasets.windows import FrameStore, FrameWindows
from agents.training.labels import labels


class Demos:
    """Every episode of the given folders, keyed "folder:seed": where each one is and how long, read from the
    manifests; the frames are read once, by `store`, straight into the one array a training split keeps."""

    action_space: str
    files: dict[str, tuple[Path, int]]  # key -> (episode file, steps)

    @classmethod
    def load(cls, folders: list[str], quiet: bool = False) -> "Demos":
        sets = [DemoSet(f) for f in folders]
        spaces = {s.manifest.get("action_space") for s in sets}
        if len(spaces) != 1:
            raise DataError(f"the demonstration folders mix action spaces ({', '.join(sorted(map(str, spaces)))}); train on one")
        files: dict[str, tuple[Path, int]] = {}
        for s in sets:
            if not s.episodes:
                raise DataError(f"{s.dir} holds no episodes yet; record some with 'nacdrive collect'")
            for e in s.episodes:
                files[f"{s.dir.name}:{e['seed']}"] = (s.dir / e["file"], int(e["length"]))
        return cls(spaces.pop(), files, quiet)

    def __init__(self, action_space: str, files: dict[str, tuple[Path, int]], quiet: bool = True) -> None:
        self.action_space, self.files, self.quiet = action_space, files, quiet

    def episode(self, key: str) -> Episode:
        return read_episode(self.files[key][0])

    def store(self, keys: list[str]) -> FrameStore:
        read = (self.episode(k) for k in tqdm(keys, desc="loading episodes", unit="ep", leave=False, disable=self.quiet))
        return FrameStore(read, [self.files[k][1] for k in keys])


class Batches:
    """Chunks of consecutive steps of a store, in an order fixed by (seed, epoch)."""

    def __init__(self, windows: FrameWindows, chunk: int, batch_size: int, row_weights: np.ndarray | None,
                 targets: dict[str, np.ndarray] | None = None) -> None:
        s = windows.store
        self.targets = targets or {}  # per-row targets beyond the actions (net_targets)
        starts, lengths = [], []
        for first, n in zip(s.starts, s.lengths):
            st = np.arange(first, first + n, chunk)
            starts.append(st)
            lengths.append(np.minimum(chunk, first + n - st))
        self.windows = windows
        self.starts = np.concatenate(starts)
        self.lengths = np.concatenate(lengths)
        self.per_batch = max(1, batch_size // chunk)
        # balanced sampling: a chunk is drawn in proportion to its rows' weights
        self.p = None
        if row_weights is not None:
            w = np.add.reduceat(row_weights, self.starts)
            self.p = w / w.sum()

    def __len__(self) -> int:
        return math.ceil(len(self.starts) / self.per_batch)

    def order(self, seed: int, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([seed, epoch])
        n = len(self.starts)
        return rng.permutation(n) if self.p is None else rng.choice(n, size=n, p=self.p)

    def rows(self, chunks: np.ndarray) -> np.ndarray:
        return np.concatenate([np.arange(self.starts[c], self.starts[c] + self.lengths[c]) for c in chunks])

    def batch(self, rows: np.ndarray, back: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Distinct frames of the rows' windows, the index of each window into them, times, labels, on the host.
        back: irregular windows (see datasets.windows.jittered_back)."""
        s = self.windows.store
        idx, _ = self.windows.indices(rows, back)  # (n, W) frame rows
        uniq, inverse = np.unique(idx, return_inverse=True)
        return {
            "frames": s.frames[uniq],  # (U, H, W, 3)
            "index": inverse.reshape(idx.shape),  # (n, W)
            "timestamps": s.timestamps[idx].astype(np.float32),  # (n, W)
            **labels(s, rows, self.targets),
        }


def two_views(batch: dict[str, Tensor], views: Tensor) -> dict[str, Tensor]:
    """A batch twice over: its windows on its own frames, then the same windows on `views` (another view of each
    frame, (U, H, W, 3)), every per-row entry repeated (the consistency loss's clean and augmented halves)."""
    u = len(batch["frames"])
    out = {k: torch.cat([v, v]) for k, v in batch.items() if k not in ("frames", "index")}
    out["frames"] = torch.cat([batch["frames"], views])
    out["index"] = torch.cat([batch["index"], batch["index"] + u])
    return out


def chunk_of_frames(n_frames: int, idx: np.ndarray, chunk_of_row: np.ndarray) -> np.ndarray:
    """(U,) the chunk of each of a batch's frames: that of the first window that uses it, so that a
    window's frames take one chunk's random draws. idx (n, W) into the frames."""
    first_row = np.full(n_frames, idx.shape[0])
    np.minimum.at(first_row, idx.ravel(), np.repeat(np.arange(idx.shape[0]), idx.shape[1]))
    return chunk_of_row[np.minimum(first_row, idx.shape[0] - 1)]


def shifted(frames: Tensor, chunk: np.ndarray, pad: int, rng: np.random.Generator) -> Tensor:
    """Random-shift augmentation (DrQ, Kostrikov et al. 2020; RAD, Laskin et al. 2020): each chunk of
    consecutive steps is moved by (dy, dx) in -pad..pad with its edge pixels repeated (replicate
    padding, then the crop back to size). frames (U, H, W, 3) uint8, chunk (U,) each one's chunk
    (chunk_of_frames). Written here rather than taken from a library: torchvision's RandomCrop draws
    one shift per call, not per group of frames, and would be one more dependency for eight lines."""
    u, h, w = frames.shape[:3]
    dy, dx = rng.integers(-pad, pad + 1, size=(2, int(chunk.max()) + 1))
    ys = np.clip(np.arange(h)[None, :] + dy[chunk][:, None], 0, h - 1)  # (U, H)
    xs = np.clip(np.arange(w)[None, :] + dx[chunk][:, None], 0, w - 1)  # (U, W)
    frames_idx = torch.arange(u, device=frames.device)[:, None, None]
    return frames[frames_idx, torch.from_numpy(ys).to(frames.device)[:, :, None], torch.from_numpy(xs).to(frames.device)[:, None, :]]
