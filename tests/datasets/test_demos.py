"""Demonstration files and manifests: lossless, atomic, verifiable."""

import json

import numpy as np
import pytest

from datasets.demos import DataError, DemoSet, Episode, read_episode, write_episode


def _episode(seed: int, n: int = 30, continuous: bool = False) -> Episode:
    rng = np.random.default_rng(seed)
    return Episode(
        seed=seed,
        frames=rng.integers(0, 256, (n, 96, 96, 3), dtype=np.uint8),
        actions=rng.random((n, 3), dtype=np.float32) if continuous else rng.integers(0, 5, n),
        rewards=rng.random(n, dtype=np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.r_[np.zeros(n - 1, bool), True],
        timestamps=np.arange(n) / 50.0,
        state=rng.random((n, 6), dtype=np.float32),
    )


def _demo_set(tmp_path, seeds=(0, 1, 2)) -> DemoSet:
    demos = DemoSet.create(tmp_path / "d", {"action_space": "discrete", "action_names": ["noop", "right", "left", "gas", "brake"], "expert": {"name": "test"}})
    for s in seeds:
        demos.add(write_episode(demos.dir, _episode(s)))
    return demos


def test_episode_files_are_lossless(tmp_path):
    ep = _episode(7)
    write_episode(tmp_path, ep)
    back = read_episode(tmp_path / "episode_0000007.npz")
    for name in ("frames", "actions", "rewards", "terminated", "truncated", "timestamps", "state"):
        assert np.array_equal(getattr(back, name), getattr(ep, name)), name
    assert back.frames.dtype == np.uint8 and back.seed == 7
    assert back.final_frame is None  # kept only when recorded


def test_the_final_frame_round_trips_and_must_match_the_frames(tmp_path):
    ep = _episode(8)
    ep.final_frame = np.full((96, 96, 3), 7, np.uint8)
    write_episode(tmp_path, ep)
    assert np.array_equal(read_episode(tmp_path / "episode_0000008.npz").final_frame, ep.final_frame)
    ep.final_frame = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(DataError, match="final_frame must be one"):
        write_episode(tmp_path, ep)


def test_a_failed_write_leaves_no_file_with_the_final_name(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", boom)
    with pytest.raises(OSError):
        write_episode(tmp_path, _episode(3))
    assert list(tmp_path.iterdir()) == []


def test_check_passes_on_a_sound_set_and_names_every_problem(tmp_path):
    demos = _demo_set(tmp_path)
    assert demos.check() == []
    (demos.dir / "episode_0000001.npz").write_bytes(b"garbage")
    (demos.dir / "episode_0000002.npz").unlink()
    write_episode(demos.dir, _episode(9))  # written but never registered
    (demos.dir / ".episode_0000010.npz.tmp").write_bytes(b"half")
    problems = "\n".join(DemoSet(demos.dir).check())
    assert "episode_0000001.npz: contents differ" in problems
    assert "episode_0000002.npz: listed in the manifest but missing" in problems
    assert "episode_0000009.npz: complete episode file not in the manifest" in problems
    assert ".episode_0000010.npz.tmp: unfinished temporary file" in problems


def test_loading_reads_only_listed_episodes_never_temporary_files(tmp_path):
    demos = _demo_set(tmp_path, seeds=(0, 1))
    (demos.dir / ".episode_0000005.npz.tmp").write_bytes(b"half")
    eps = DemoSet(demos.dir).load()
    assert [e.seed for e in eps] == [0, 1]
    assert [e.seed for e in demos.load(seeds=[1])] == [1]


def test_info_counts_frames_actions_and_returns(tmp_path):
    demos = _demo_set(tmp_path)
    info = demos.info()
    assert info["episodes"] == 3 and info["frames"] == 90 and info["seeds"] == "0-2"
    assert sum(info["actions"].values()) == 90 and set(info["actions"]) == {"noop", "right", "left", "gas", "brake"}
    assert info["mean_return"] == pytest.approx(np.mean([_episode(s).episode_return for s in range(3)]))


def test_a_folder_that_is_not_a_demonstration_set_is_refused_clearly(tmp_path):
    with pytest.raises(DataError, match="is not a demonstration set"):
        DemoSet(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(DataError, match="expected 'nacdrive-demos/1'"):
        DemoSet(tmp_path)
    empty = DemoSet.create(tmp_path / "e", {"action_space": "discrete"})
    with pytest.raises(DataError, match="holds no episodes"):
        empty.load()


def test_the_same_seed_is_never_registered_twice(tmp_path):
    demos = _demo_set(tmp_path, seeds=(0,))
    with pytest.raises(DataError, match="already in"):
        demos.add(write_episode(demos.dir, _episode(0)))


def test_a_finished_lap_is_recorded_in_the_manifest(tmp_path):
    demos = _demo_set(tmp_path, seeds=())
    lap, crash = _episode(1), _episode(2)
    lap.terminated[-1], lap.truncated[-1] = True, False
    crash.terminated[-1], crash.truncated[-1], crash.rewards[-1] = True, False, -100.0
    demos.add(write_episode(demos.dir, lap))
    demos.add(write_episode(demos.dir, crash))
    entries = json.loads((demos.dir / "manifest.json").read_text())["episodes"]
    assert [e["lap_finished"] for e in entries] == [True, False]
    assert DemoSet(demos.dir).check() == []
