"""Export to Minari: what `minari.load_dataset` reads back is the recording, frame for frame."""

import shutil

import gymnasium as gym
import minari
import numpy as np
import pytest

from agents.training.collect import CollectConfig, collect
from datasets.demos import DataError, DemoSet, read_episode, write_episode
from scripts.cli import main


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos") / "d"
    collect(CollectConfig(out=str(out), workers=1, max_steps=20, episodes=2, seed_start=5, continuous=False))
    return DemoSet(out)


def test_the_recording_keeps_the_frame_after_the_last_step(recorded):
    """Replaying an episode's seed and actions in the environment the manifest names gives, after
    the last action, the kept final frame."""
    ep = read_episode(recorded.dir / recorded.episodes[0]["file"])
    env = gym.make(recorded.manifest["env_id"], **recorded.manifest["env_kwargs"])
    obs, _ = env.reset(seed=ep.seed)
    assert np.array_equal(obs, ep.frames[0])
    for a in ep.actions:
        obs, *_ = env.step(int(a))
    env.close()
    assert np.array_equal(obs, ep.final_frame) and not np.array_equal(obs, ep.frames[-1])


def test_minari_reads_back_every_frame_action_and_flag(recorded, tmp_path, monkeypatch):
    assert main(["data", "export-minari", str(recorded.dir), "--root", str(tmp_path), "--dataset-id", "test/carracing-v1"]) == 0
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    data = minari.load_dataset("test/carracing-v1")
    assert data.total_episodes == 2 and data.total_steps == 40
    assert data.env_spec.id == "nacdrive/CarRacing-v3" and data.env_spec.kwargs["continuous"] is False
    assert data.env_spec.max_episode_steps == 20
    for entry, got in zip(recorded.episodes, data.iterate_episodes()):
        ep = read_episode(recorded.dir / entry["file"])
        assert got.observations.dtype == np.uint8 and len(got.observations) == len(ep) + 1
        assert np.array_equal(got.observations[:-1], ep.frames)  # lossless: no JPEG on the way
        assert np.array_equal(got.observations[-1], ep.final_frame)
        assert np.array_equal(got.actions, ep.actions)
        assert np.allclose(got.rewards, ep.rewards)
        assert np.array_equal(got.terminations, ep.terminated) and np.array_equal(got.truncations, ep.truncated)
        assert np.allclose(got.infos["timestamp"], np.arange(len(ep) + 1) / 50)
    assert data.recover_environment().spec.kwargs["continuous"] is False


def test_export_refuses_an_existing_id_a_malformed_id_and_old_recordings(recorded, tmp_path, capsys):
    root = str(tmp_path / "root")
    assert main(["data", "export-minari", str(recorded.dir), "--root", root]) == 0
    assert main(["data", "export-minari", str(recorded.dir), "--root", root]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["data", "export-minari", str(recorded.dir), "--root", root, "--dataset-id", "no version"]) == 2
    assert "(namespace/)name-v(version)" in capsys.readouterr().err

    # A set whose second episode was recorded before the final frame was kept: refused, and
    # the half-written dataset is removed.
    old = DemoSet(shutil.copytree(recorded.dir, tmp_path / "old"))
    ep = read_episode(old.dir / old.episodes[1]["file"])
    ep.final_frame = None
    write_episode(old.dir, ep)
    with pytest.raises(DataError, match="without the frame after its last step"):
        from datasets.minari_export import export_minari

        export_minari(old, "test/old-v0", tmp_path / "root2")
    assert not (tmp_path / "root2" / "test" / "old-v0").exists()
