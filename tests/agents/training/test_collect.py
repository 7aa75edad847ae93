"""Recording demonstrations: refuses to overwrite, resumes after a kill, never records twice."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from agents.training.collect import CollectConfig, collect
from datasets.demos import DemoSet
from nac.config import ConfigError
from tests.limits import seconds


def _cfg(out, **kw):
    return CollectConfig(out=str(out), workers=1, max_steps=40, **{"episodes": 2, "continuous": False, **kw})


def test_collect_records_frames_actions_and_privileged_state(tmp_path):
    info = collect(_cfg(tmp_path / "d", episodes=2))
    assert info["episodes"] == 2 and info["frames"] == 80
    demos = DemoSet(tmp_path / "d")
    ep = demos.load()[0]
    assert ep.frames.shape == (40, 96, 96, 3) and ep.frames.dtype == np.uint8
    assert ep.frames[10:].std() > 0  # real camera frames
    assert set(np.unique(ep.actions)) <= set(range(5))
    assert np.allclose(np.diff(ep.timestamps), 1 / 50)
    assert ep.state.shape == (40, 9) and ep.state[-1, 3] > ep.state[0, 3]  # the car sped up
    assert np.isnan(ep.state[:, 8]).all()  # policy_saw: no policy drove an expert demonstration
    # the planning expert's wheel angle 3 steps ahead, beside the car's: its plans came true at the start
    plan, wheel = ep.state[:, 6], ep.state[:, 4]
    assert np.isfinite(plan).all() and np.abs(plan[:-3] - wheel[3:]).max() < 1e-3
    # its speed above its target speed: the target (speed - excess) is never below its minimum of 20 u/s
    excess = ep.state[:, 7]
    assert np.isfinite(excess).all() and (ep.state[:, 3] - excess >= 20.0 - 1e-3).all()
    m = demos.manifest
    assert m["env_id"] == "nacdrive/CarRacing-v3" and m["action_space"] == "discrete"
    assert m["env_kwargs"] == {"continuous": False, "max_episode_steps": 40, "renderer": "direct", "scenario": "clean"}
    assert m["expert"]["name"] == "track" and "lookahead" in m["expert"]["config"]
    assert {"python", "gymnasium", "numpy"} <= set(m["software"])
    assert [e["seed"] for e in m["episodes"]] == [0, 1]


def test_a_non_empty_folder_is_refused_and_action_spaces_are_not_mixed(tmp_path):
    collect(_cfg(tmp_path / "d", episodes=1))
    with pytest.raises(ConfigError, match="is not empty; use --resume"):
        collect(_cfg(tmp_path / "d"))
    with pytest.raises(ConfigError, match="a continuous expert cannot record into it"):
        collect(_cfg(tmp_path / "d", append=True, continuous=True))
    with pytest.raises(ConfigError, match="nothing to resume"):
        collect(_cfg(tmp_path / "other", resume=True))


def test_append_adds_new_seeds_after_the_last(tmp_path):
    collect(_cfg(tmp_path / "d", episodes=2))
    collect(_cfg(tmp_path / "d", episodes=2, append=True))
    assert DemoSet(tmp_path / "d").seeds() == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="already planned"):
        collect(_cfg(tmp_path / "d", episodes=1, append=True, seed_start=3))


def test_a_killed_collection_resumes_without_recording_anything_twice(tmp_path):
    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "scripts.cli", "collect", "--out", str(out), "--episodes", "6",
           "--max-steps", "60", "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + seconds(120)
    try:
        while time.time() < deadline:
            manifest = out / "manifest.json"
            if manifest.exists() and len(json.loads(manifest.read_text())["episodes"]) >= 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("collection did not start")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the command and its workers, mid-episode
        proc.wait()
    written = DemoSet(out).seeds()
    assert 2 <= len(written) < 6
    result = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=seconds(300))
    assert result.returncode == 0, result.stderr
    demos = DemoSet(out)
    assert demos.seeds() == [0, 1, 2, 3, 4, 5]
    assert demos.check() == []
    assert not list(out.glob(".*.tmp"))


def test_steering_noise_drifts_the_car_while_the_labels_stay_the_experts(tmp_path):
    from agents.training.collect import SteeringDrift

    sets = {}
    for noise in (0.0, 0.5):
        collect(CollectConfig(out=str(tmp_path / f"n{noise}"), episodes=1, workers=1, max_steps=80, continuous=True, noise=noise, seed_start=3))
        sets[noise] = DemoSet(tmp_path / f"n{noise}")
    clean, noisy = (sets[n].load()[0] for n in (0.0, 0.5))
    assert "steering_noise" not in sets[0.0].manifest and sets[0.5].manifest["steering_noise"]["std"] == 0.5
    assert np.abs(clean.state[:, :6] - noisy.state[:, :6]).max() > 0.1  # the executed steering differed: the car went elsewhere
    assert np.isnan(clean.state[:, 6]).all()  # the continuous expert plans no wheel angle
    assert np.isfinite(clean.state[:, 7]).all()  # but has a target speed
    # replayed by hand: the expert drives, the drift moves what is executed, and what was recorded
    # is the expert's own choice at every step, not the executed action
    from agents.carracing.env import make_env
    from agents.experts import make_expert

    env = make_env(True, 80, pixels=False)
    obs, _ = env.reset(seed=3)
    expert, drift = make_expert("track", env), SteeringDrift(0.5, 3)
    expert.reset()
    labels, executed = [], []
    for _ in range(len(noisy.actions)):
        a = np.asarray(expert.select_action(obs), dtype=np.float32)
        e = drift(a)
        labels.append(a)
        executed.append(e)
        obs, *_ = env.step(e)
    env.close()
    assert np.allclose(noisy.actions, labels, atol=1e-6) and not np.allclose(noisy.actions, executed, atol=1e-3)
    with pytest.raises(ConfigError, match="is for continuous actions"):
        CollectConfig(out="x", noise=0.3, continuous=False)


def _scene_colour(frame):
    """The commonest colour of the frame's scene (the background, where the camera looks over the grass)."""
    colours, counts = np.unique(frame[:84].reshape(-1, 3), axis=0, return_counts=True)
    return tuple(int(c) for c in colours[counts.argmax()])


def test_a_scene_is_recorded_in_and_a_run_of_it_drives_its_dagger_rollouts_there(tmp_path):
    """--scene domain-randomize: the expert drives under gymnasium's random colours; the set says so, takes no episodes
    of another scene, and a run trained on it drives its DAgger rollouts in it."""
    from agents.training.dagger import dagger
    from agents.training.dagger_config import DaggerConfig
    from agents.training.loop import TrainConfig
    from agents.training.trainers import train

    collect(_cfg(tmp_path / "clean", episodes=2))
    clean = {_scene_colour(e.frames[-1]) for e in DemoSet(tmp_path / "clean").load()}
    assert len(clean) == 1  # the default grass on every track
    collect(_cfg(tmp_path / "dr", episodes=3, scene="domain-randomize"))
    demos = DemoSet(tmp_path / "dr")
    assert demos.manifest["env_kwargs"]["scenario"] == "domain-randomize"
    colours = {_scene_colour(e.frames[-1]) for e in demos.load()}
    assert len(colours) == 3 and not colours & clean  # a colour of its own per track, none the default
    with pytest.raises(ConfigError, match="was recorded in the scene domain-randomize, not clean"):
        collect(_cfg(tmp_path / "dr", episodes=1, append=True))
    with pytest.raises(ConfigError, match="unknown scenario"):
        _cfg(tmp_path / "x", scene="fog")
    run = tmp_path / "run"
    train(TrainConfig(data=[str(tmp_path / "dr")], out=str(run), head="gru", window=2, epochs=1, batch_size=16, chunk=4,
                      val_episodes=[f"dr:{2}"]), quiet=True)
    dagger(DaggerConfig(run=str(run), rounds=1, episodes=1, epochs=1, workers=1, max_steps=40, beta=0.5), quiet=True)
    rollouts = DemoSet(run / "dagger")
    assert rollouts.manifest["env_kwargs"]["scenario"] == "domain-randomize"
    assert _scene_colour(rollouts.load()[0].frames[-1]) not in clean
