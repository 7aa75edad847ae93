"""Training views of demonstrations: windows of W frames labelled at the last frame, and
splits by episode (frames of one episode never on both sides).

Episodes are decoded once into one contiguous uint8 array, so an epoch is index arithmetic
and a gather, not decoding: 50k frames of 96x96x3 take 1.4 GB of RAM, and nothing else holds them.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from datasets.demos import DataError, Episode


class FrameStore:
    """All frames, actions and timestamps of some episodes, concatenated."""

    def __init__(self, episodes: Iterable[Episode], lengths: Sequence[int] | None = None) -> None:
        """episodes: a sequence, or an iterable read one at a time (a generator reading files) with their
        `lengths` given beforehand: each one's frames are copied into the one array as it comes and then
        dropped, so that at most one episode's frames are held twice (50 episodes of frames are 1.4 GB)."""
        if lengths is None:
            episodes = list(episodes)
            lengths = [len(e) for e in episodes]
        if not len(lengths):
            raise DataError("no episodes to train on")
        self.lengths = np.array(lengths)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])  # first row of each episode
        frames: np.ndarray | None = None
        seeds, actions, timestamps, states = [], [], [], []
        for i, e in enumerate(episodes):
            if len(e) != self.lengths[i]:
                raise DataError(f"episode {e.seed} has {len(e)} steps where its manifest says {self.lengths[i]}: the set "
                                "does not match its manifest ('nacdrive data check' lists what differs)")
            if frames is None:
                frames = np.empty((int(self.lengths.sum()), *e.frames.shape[1:]), dtype=e.frames.dtype)
            frames[self.starts[i] : self.starts[i] + len(e)] = e.frames
            seeds.append(e.seed)
            actions.append(e.actions)
            timestamps.append(e.timestamps)
            states.append(e.state)
        if len(seeds) != len(self.lengths):
            raise DataError(f"{len(seeds)} episodes came where {len(self.lengths)} were announced")
        self.seeds = seeds
        self.frames = frames  # (N, H, W, 3) uint8
        self.actions = np.concatenate(actions)  # (N,) or (N, 3)
        self.timestamps = np.concatenate(timestamps)  # (N,) seconds in episode
        # (N, S) privileged state; its columns are only ever appended to, so an episode recorded before a column
        # existed has fewer: NaN there
        width = max(st.shape[1] for st in states)
        self.state = np.concatenate([
            np.pad(st.astype(np.float32), ((0, 0), (0, width - st.shape[1])), constant_values=np.nan) for st in states
        ])
        self.episode_of = np.repeat(np.arange(len(seeds)), self.lengths)  # (N,)

    def __len__(self) -> int:
        return len(self.frames)

    def action_rates(self, k: int, n_actions: int) -> np.ndarray:
        """(N, n_actions) float32: for each step of discrete actions, the share of each action
        over the steps t-k..t+k of its episode (fewer at the episode's ends)."""
        if self.actions.ndim != 1:
            raise DataError("action rates are for discrete actions")
        onehot = np.eye(n_actions, dtype=np.float64)[self.actions.astype(np.int64)]
        out = np.empty((len(self), n_actions), dtype=np.float32)
        for first, n in zip(self.starts, self.lengths):
            csum = np.concatenate([np.zeros((1, n_actions)), np.cumsum(onehot[first : first + n], axis=0)])
            t = np.arange(n)
            lo, hi = np.maximum(t - k, 0), np.minimum(t + k + 1, n)
            out[first : first + n] = (csum[hi] - csum[lo]) / (hi - lo)[:, None]
        return out


class FrameWindows(Dataset):
    """Item i: the W frames ending at row i (every `stride`-th step back), the timestamps, a mask
    of which positions are real (before an episode's first frame the first frame is repeated
    and marked padding), and the expert's action at the last frame."""

    def __init__(self, store: FrameStore, window: int = 8, stride: int = 1) -> None:
        if window < 1 or stride < 1:
            raise DataError(f"window and stride must be >= 1 (got {window}, {stride})")
        span = (window - 1) * stride + 1
        shortest = int(store.lengths.min())
        if span > shortest:
            seed = store.seeds[int(store.lengths.argmin())]
            raise DataError(
                f"a window of {window} frames with stride {stride} spans {span} steps, longer than episode "
                f"{seed} ({shortest} steps); use a smaller --window or --stride"
            )
        self.store, self.window, self.stride = store, window, stride
        self._back = np.arange(window - 1, -1, -1) * stride  # (W,) steps back from the last frame

    def __len__(self) -> int:
        return len(self.store)

    def indices(self, rows: np.ndarray, back: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(n, W) frame rows of the windows ending at `rows`, and (n, W) bool real-frame mask.
        back: (n, W) steps back from the last frame per window (irregular windows); default the
        regular stride."""
        s = self.store
        first = s.starts[s.episode_of[rows]]  # (n,)
        idx = rows[:, None] - (self._back[None, :] if back is None else back)  # (n, W)
        valid = idx >= first[:, None]
        return np.where(valid, idx, first[:, None]), valid

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        idx, valid = self.indices(np.array([i]))
        s = self.store
        return {
            "frames": torch.from_numpy(s.frames[idx[0]]),  # (W, H, W, 3) uint8
            "timestamps": torch.from_numpy(s.timestamps[idx[0]]).float(),  # (W,)
            "valid": torch.from_numpy(valid[0]),  # (W,)
            "action": torch.as_tensor(s.actions[i]),
        }


def jittered_back(n: int, window: int, max_gap: int, rng: np.random.Generator, regular_share: float = 0.0) -> np.ndarray:
    """(n, window) steps back from the last frame, with gaps between frames drawn from 1..max_gap
    (windows as a policy sees them when frames arrive at irregular times); a `regular_share` of
    the windows keeps gaps of 1 (the clean stream), so that training on both keeps clean driving."""
    gaps = rng.integers(1, max_gap + 1, size=(n, window - 1))
    if regular_share > 0:
        gaps[rng.random(n) < regular_share] = 1
    back = np.concatenate([np.cumsum(gaps[:, ::-1], axis=1)[:, ::-1], np.zeros((n, 1), np.int64)], axis=1)
    return back


def arrival_back(store: FrameStore, saw_column: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The windows a policy saw where it decided, for episodes in which it did not see every frame.

    `store.state[:, saw_column]` is 1 where the driving policy saw a frame when it came, 0 where a
    perturbation kept it from it (agents.carracing.perturb: dropped frames, jitter), NaN where no policy drove.
    Returns `back` (N, window): for each row the policy saw in such an episode, the steps back to
    the frames its window held there (itself and the window - 1 frames it saw before it; before the
    episode's first frame the first is repeated, as the policy does), and `has` (N,) marking those
    rows; other rows' `back` is the regular one. Training on them puts into the data the windows the
    policy decided on, with the gaps they really had, where windows cut with fresh random gaps
    (jittered_back) would pair the same frames with gaps the policy never met.
    """
    n = len(store)
    back = np.tile(np.arange(window - 1, -1, -1), (n, 1))
    has = np.zeros(n, bool)
    if store.state.shape[1] <= saw_column:
        return back, has
    saw = store.state[:, saw_column]
    for first, length in zip(store.starts, store.lengths):
        s = saw[first : first + length]
        if not (np.isfinite(s).all() and (s == 0).any() and (s == 1).any()):
            continue  # every frame seen, none seen when it came (delay), or no policy drove: the regular windows
        seen = first + np.flatnonzero(s == 1)
        padded = np.concatenate([np.full(window - 1, first - 1), seen])  # before the first frame: the first, repeated
        back[seen] = seen[:, None] - np.lib.stride_tricks.sliding_window_view(padded, window)
        has[seen] = True
    return back, has


def split_by_episode(seeds: Sequence[int], val_fraction: float = 0.2, seed: int = 0) -> tuple[list[int], list[int]]:
    """Train / validation seeds; at least one episode on each side when there are two or more."""
    if not 0 < val_fraction < 1:
        raise DataError(f"validation fraction must be between 0 and 1 (got {val_fraction})")
    order = np.random.default_rng(seed).permutation(sorted(seeds))
    if len(order) < 2:
        raise DataError(f"splitting by episode needs at least 2 episodes (got {len(order)})")
    n_val = min(len(order) - 1, max(1, round(val_fraction * len(order))))
    return sorted(order[n_val:].tolist()), sorted(order[:n_val].tolist())


def kfold_by_episode(seeds: Sequence[int], folds: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """k (train, validation) splits whose validation episodes partition the seeds."""
    if folds < 2 or folds > len(seeds):
        raise DataError(f"--folds must be between 2 and the number of episodes ({len(seeds)}), got {folds}")
    order = np.random.default_rng(seed).permutation(sorted(seeds))
    parts = np.array_split(order, folds)
    return [
        (sorted(np.concatenate([p for j, p in enumerate(parts) if j != k]).tolist()), sorted(parts[k].tolist()))
        for k in range(folds)
    ]
