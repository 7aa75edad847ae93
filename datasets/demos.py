"""Demonstration sets on disk: one compressed .npz file per episode plus a manifest.json.

Frames are stored losslessly (uint8 as the environment gives them, zip-deflated, not JPEG).
An episode file is written under a temporary name and renamed when complete, so a file with
the final name is always whole; the manifest lists every finished episode with its seed,
length, return and SHA-256, and is itself replaced atomically.

This module knows no model and no expert: the caller describes the expert as a dict.
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from nac.checkpoint import read_json, replace_file, write_json

MANIFEST = "manifest.json"
FORMAT = "nacdrive-demos/1"
ARRAYS = ("frames", "actions", "rewards", "terminated", "truncated", "timestamps", "state")


class DataError(ValueError):
    """A demonstration folder or file is not what it should be; the message says what."""


@dataclass
class Episode:
    """One recorded episode; row t holds the frame the action was chosen on and its outcome."""

    seed: int
    frames: np.ndarray  # (T, H, W, 3) uint8
    actions: np.ndarray  # (T,) int64 (discrete) or (T, 3) float32 (steer, gas, brake)
    rewards: np.ndarray  # (T,) float32
    terminated: np.ndarray  # (T,) bool
    truncated: np.ndarray  # (T,) bool
    timestamps: np.ndarray  # (T,) float64, seconds since the episode's first frame
    state: np.ndarray  # (T, S) float32, privileged state (the manifest names the columns)
    # (H, W, 3) uint8, the frame after the last step (Minari's T + 1st observation); None in
    # files recorded before it was kept
    final_frame: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def episode_return(self) -> float:
        return float(self.rewards.astype(np.float64).sum())

    def check(self) -> None:
        n = len(self.frames)
        if n == 0:
            raise DataError(f"episode {self.seed} has no steps")
        if self.frames.dtype != np.uint8 or self.frames.ndim != 4 or self.frames.shape[-1] != 3:
            raise DataError(f"episode {self.seed}: frames must be (T, H, W, 3) uint8, got {self.frames.shape} {self.frames.dtype}")
        for name in ARRAYS[1:]:
            if len(getattr(self, name)) != n:
                raise DataError(f"episode {self.seed}: {name} has {len(getattr(self, name))} rows, frames have {n}")
        if self.final_frame is not None and (self.final_frame.shape != self.frames.shape[1:] or self.final_frame.dtype != np.uint8):
            raise DataError(f"episode {self.seed}: final_frame must be one {self.frames.shape[1:]} uint8 frame, got {self.final_frame.shape} {self.final_frame.dtype}")


def episode_filename(seed: int) -> str:
    return f"episode_{seed:07d}.npz"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_episode(directory: str | Path, episode: Episode, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the episode (temporary name, fsync, rename) and return its manifest entry."""
    episode.check()
    d = Path(directory)
    final = d / episode_filename(episode.seed)
    tmp = d / f".{final.name}.tmp"
    try:
        with open(tmp, "wb") as f:
            after = {} if episode.final_frame is None else {"final_frame": episode.final_frame}
            np.savez_compressed(f, seed=np.int64(episode.seed), **{name: getattr(episode, name) for name in ARRAYS}, **after)
            f.flush()
            os.fsync(f.fileno())
        replace_file(tmp, final, "episode")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest_entry(final, episode, extra)


def manifest_entry(path: Path, episode: Episode, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the manifest records of a written episode file."""
    return {
        "file": path.name,
        "seed": episode.seed,
        "length": len(episode),
        "return": episode.episode_return,
        # the last step ends the episode by termination that is not the -100 of leaving the field
        "lap_finished": bool(episode.terminated[-1] and episode.rewards[-1] > -50),
        "sha256": sha256(path),
        "bytes": path.stat().st_size,
        **(extra or {}),
    }


def read_episode(path: str | Path) -> Episode:
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = [name for name in ARRAYS if name not in z.files]
            if missing:
                raise DataError(f"{p.name} lacks {', '.join(missing)}: not an episode file")
            final = z["final_frame"] if "final_frame" in z.files else None
            ep = Episode(seed=int(z["seed"]), **{name: z[name] for name in ARRAYS}, final_frame=final)
    except DataError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, EOFError, ValueError, ...
        raise DataError(f"{p} cannot be read ({type(exc).__name__}: {exc}): it is cut short or damaged; 'nacdrive data check "
                        f"{p.parent}' lists such files, and 'nacdrive collect --resume' records them again") from None
    ep.check()
    return ep


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for pkg in ("nac-drive", "numpy", "gymnasium", "box2d", "torch", "stable-baselines3"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return versions


class DemoSet:
    """A demonstration folder: its manifest and its episode files."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        path = self.dir / MANIFEST
        if not self.dir.is_dir():
            raise DataError(f"{self.dir} is not a folder")
        if not path.is_file():
            raise DataError(f"{self.dir} is not a demonstration set (no {MANIFEST}); record one with 'nacdrive collect'")
        self.manifest: dict[str, Any] = read_json(path, "its episode files are whole: 'nacdrive data check' lists them, and "
                                                       "'nacdrive collect' into a new folder records the set again")
        if self.manifest.get("format") != FORMAT:
            raise DataError(f"{path} has format {self.manifest.get('format')!r}, expected {FORMAT!r}")

    @staticmethod
    def create(directory: str | Path, header: dict[str, Any]) -> "DemoSet":
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        manifest = {"format": FORMAT, **header, "software": software_versions(), "episodes": []}
        write_json(d / MANIFEST, manifest)
        return DemoSet(d)

    @property
    def episodes(self) -> list[dict[str, Any]]:
        return self.manifest["episodes"]

    @property
    def continuous(self) -> bool:
        return self.manifest.get("action_space") == "continuous"

    def seeds(self) -> list[int]:
        return [e["seed"] for e in self.episodes]

    def add(self, entry: dict[str, Any]) -> None:
        """Register a written episode and save the manifest (atomically)."""
        if entry["seed"] in self.seeds():
            raise DataError(f"episode with seed {entry['seed']} is already in {self.dir}")
        self.episodes.append(entry)
        self.episodes.sort(key=lambda e: e["seed"])
        self.save()

    def save(self) -> None:
        write_json(self.dir / MANIFEST, self.manifest)

    def load(self, seeds: Iterable[int] | None = None) -> list[Episode]:
        """Episodes (all, or those with the given seeds), decoded into memory."""
        wanted = None if seeds is None else set(seeds)
        entries = [e for e in self.episodes if wanted is None or e["seed"] in wanted]
        if not entries:
            raise DataError(f"{self.dir} holds no episodes" + ("" if wanted is None else f" with seeds {sorted(wanted)[:5]}..."))
        return [read_episode(self.dir / e["file"]) for e in entries]

    def temporary_files(self) -> list[Path]:
        return sorted(self.dir.glob(".episode_*.tmp"))

    def orphan_files(self) -> list[Path]:
        """Complete episode files that the manifest does not list (written, then interrupted)."""
        listed = {e["file"] for e in self.episodes}
        return sorted(p for p in self.dir.glob("episode_*.npz") if p.name not in listed)

    def _unlike_manifest(self, e: dict[str, Any]) -> str | None:
        """How a listed episode's file differs from its manifest entry (gone, or other contents), or None."""
        p = self.dir / e["file"]
        if not p.is_file():
            return "listed in the manifest but missing"
        if sha256(p) != e["sha256"]:
            return "contents differ from the manifest (SHA-256 mismatch)"
        return None

    def recover(self) -> None:
        """After an interruption: delete half-written files (never data) and register whole
        episode files written just before it (unreadable ones are deleted, to be recorded again).
        A listed episode whose file is gone or differs from the manifest (cut short by a copy, damaged) leaves the
        manifest, to be recorded again; its file is kept beside, renamed *.damaged."""
        for tmp in self.temporary_files():
            tmp.unlink()
        damaged = [e for e in self.episodes if self._unlike_manifest(e)]
        for e in damaged:
            if (self.dir / e["file"]).is_file():
                os.replace(self.dir / e["file"], self.dir / f"{e['file']}.damaged")
            self.episodes.remove(e)
        if damaged:
            self.save()
        for orphan in self.orphan_files():
            try:
                self.add(manifest_entry(orphan, read_episode(orphan)))
            except DataError:
                orphan.unlink()

    def check(self) -> list[str]:
        """Every problem found, one sentence each (empty when the set is sound)."""
        problems = []
        for e in self.episodes:
            p = self.dir / e["file"]
            unlike = self._unlike_manifest(e)
            if unlike:
                problems.append(f"{e['file']}: {unlike}")
                continue
            try:
                ep = read_episode(p)
            except DataError as exc:
                problems.append(str(exc))
                continue
            if ep.seed != e["seed"] or len(ep) != e["length"] or abs(ep.episode_return - e["return"]) > 1e-3:
                problems.append(f"{e['file']}: seed, length or return differ from the manifest")
        problems += [f"{p.name}: complete episode file not in the manifest ('collect --resume' adopts it)" for p in self.orphan_files()]
        problems += [f"{p.name}: unfinished temporary file (never read; 'collect --resume' removes it)" for p in self.temporary_files()]
        return problems

    def info(self) -> dict[str, Any]:
        eps = self.episodes
        returns = np.array([e["return"] for e in eps], dtype=np.float64)
        size = sum(p.stat().st_size for p in self.dir.iterdir() if p.is_file())
        out: dict[str, Any] = {
            "folder": str(self.dir),
            "env_id": self.manifest.get("env_id"),
            "action_space": self.manifest.get("action_space"),
            "expert": self.manifest.get("expert", {}).get("name"),
            "episodes": len(eps),
            "frames": int(sum(e["length"] for e in eps)),
            "seeds": seed_ranges(self.seeds()),
            "disk_bytes": size,
        }
        if len(eps):
            out.update(
                mean_return=float(returns.mean()),
                std_return=float(returns.std(ddof=1)) if len(eps) > 1 else 0.0,
                min_return=float(returns.min()),
                max_return=float(returns.max()),
                laps_finished=int(sum(bool(e.get("lap_finished")) for e in eps)),
            )
            out["actions"] = self.action_statistics()
        return out

    def action_statistics(self) -> dict[str, Any]:
        acts = [read_actions(self.dir / e["file"]) for e in self.episodes]
        a = np.concatenate(acts)
        if self.continuous:
            return {k: {"mean": float(a[:, i].mean()), "std": float(a[:, i].std())} for i, k in enumerate(("steer", "gas", "brake"))}
        names = self.manifest.get("action_names") or [str(i) for i in range(int(a.max()) + 1)]
        counts = np.bincount(a.astype(np.int64), minlength=len(names))
        return {name: int(c) for name, c in zip(names, counts)}


def read_actions(path: Path) -> np.ndarray:
    """Only the actions of an episode file (skips decoding the frames)."""
    with np.load(path, allow_pickle=False) as z:
        return z["actions"]


def seed_ranges(seeds: list[int], sep: str = "-") -> str:
    """[0, 1, 2, 5] -> '0-2, 5' ('0..2, 5' with sep '..')."""
    out, s = [], sorted(seeds)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}{sep}{s[j]}")
        i = j + 1
    return ", ".join(out)
