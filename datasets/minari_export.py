"""Export a demonstration set to Minari, the Farama Foundation's format for offline-RL datasets.

Minari (minari.farama.org) stores each episode with T + 1 observations (the frame after the last
step as well), the T actions, rewards and termination flags, and the environment's spec, so that
`minari.load_dataset(ID).recover_environment()` makes the same CarRacing. Frames are stored as
raw uint8 arrays (Minari's JPEG encoding is turned off: the recording is lossless and stays so).
Minari writes the dataset itself (HDF5); this module only maps our episodes onto its buffers.
"""

from __future__ import annotations

import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from tqdm import tqdm

from datasets.demos import DataError, DemoSet, Episode, read_episode


def default_dataset_id(demos: DemoSet) -> str:
    """nacdrive/<env>-<expert>-<action space>-v0, e.g. nacdrive/CarRacing-track-discrete-v0."""
    env = str(demos.manifest.get("env_id", "env")).split("/")[-1].split("-v")[0]
    expert = demos.manifest.get("expert", {}).get("name", "expert")
    return f"nacdrive/{env}-{expert}-{demos.manifest.get('action_space', 'actions')}-v0"


def episode_buffer(ep: Episode, frame_rate: float) -> Any:
    """One episode as Minari's EpisodeBuffer (T + 1 observations, and their timestamps as infos)."""
    from minari.data_collector import EpisodeBuffer

    if ep.final_frame is None:
        raise DataError(
            f"episode {ep.seed} was recorded without the frame after its last step, which Minari needs "
            "(T + 1 observations); record the set again with this version of 'nacdrive collect'"
        )
    return EpisodeBuffer(
        seed=ep.seed,
        observations=np.concatenate([ep.frames, ep.final_frame[None]]),
        actions=ep.actions,
        rewards=ep.rewards.astype(np.float64),
        terminations=ep.terminated,
        truncations=ep.truncated,
        infos={"timestamp": np.append(ep.timestamps, ep.timestamps[-1] + 1.0 / frame_rate)},
    )


@contextmanager
def _datasets_root(root: str | Path | None) -> Iterator[None]:
    """Minari finds its datasets through MINARI_DATASETS_PATH (default ~/.minari/datasets)."""
    if root is None:
        yield
        return
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(Path(root).resolve())
    try:
        yield
    finally:
        if old is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def export_minari(demos: DemoSet, dataset_id: str | None = None, root: str | Path | None = None) -> dict[str, Any]:
    """Write the set as a Minari dataset (under `root`, else Minari's own folder); a summary."""
    import gymnasium as gym
    import minari
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage import get_dataset_path

    dataset_id = dataset_id or default_dataset_id(demos)
    try:
        parse_dataset_id(dataset_id)
    except ValueError:
        raise DataError(f"dataset id {dataset_id!r} is not one Minari accepts: (namespace/)name-v(version), e.g. nacdrive/carracing-track-v0") from None
    entries, rate = demos.episodes, float(demos.manifest.get("frame_rate", 50))
    if not entries:
        raise DataError(f"{demos.dir} holds no episodes to export")
    with _datasets_root(root):
        path = get_dataset_path(dataset_id)
        if path.exists():
            raise DataError(f"a Minari dataset {dataset_id} already exists in {path.parent}; choose another --dataset-id or remove it")
        first = episode_buffer(read_episode(demos.dir / entries[0]["file"]), rate)  # refuse before anything is written
        env = gym.make(demos.manifest["env_id"], **demos.manifest.get("env_kwargs", {}))
        try:
            with warnings.catch_warnings():  # Minari's advice to name an author, e-mail and code link
                warnings.filterwarnings("ignore", category=UserWarning, module="minari.utils")
                dataset = minari.create_dataset_from_buffers(
                    dataset_id, [first], env=env, algorithm_name=demos.manifest.get("expert", {}).get("name"),
                    description=f"Demonstrations recorded by nacdrive collect ({demos.dir.name}); privileged state and the expert's config are in the source set's manifest.json.",
                    jpeg_encoding=False,
                )
            # One episode at a time: a set of 50 episodes is 1.4 GB of frames.
            for e in tqdm(entries[1:], desc="minari", unit="ep", initial=1, total=len(entries), dynamic_ncols=True):
                dataset.update_dataset_from_buffer([episode_buffer(read_episode(demos.dir / e["file"]), rate)])
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # half a dataset is never left behind
            raise
        finally:
            env.close()
        return {"dataset_id": dataset_id, "path": str(path), "episodes": dataset.total_episodes, "steps": int(dataset.total_steps)}
