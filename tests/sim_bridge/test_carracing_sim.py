"""The stand-in simulator (CarRacing behind the Udacity protocol): recording in training mode (the expert, with
noise or with the bridge driving a share), and closing the loop through the bridge with a trained or the shipped pilot."""

import json
import shutil
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from datasets.udacity import read_log
from nac import ConfigError
from nac.pilotnet import PilotNet, PilotNetConfig
from sim_bridge.round_trips import free_port
from sim_bridge.udacity_runs import BRIDGE_START_S, wait_listening
from tests.sim_bridge.bridges import serve
from tests.limits import seconds

ROOT = Path(__file__).parents[2]


def test_the_stand_in_simulator_closes_the_loop(tmp_path):
    """sim --record (expert drives) -> train --task udacity -> drive + sim (autonomous)."""
    rec = tmp_path / "rec"
    r = subprocess.run([sys.executable, "-m", "scripts.cli", "sim", "--record", str(rec), "--episodes", "2", "--max-steps", "40"],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds(300))
    assert r.returncode == 0, r.stderr
    assert len(read_log(rec).samples) == 80
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "scripts.cli", "train", "--task", "udacity", "--data", str(rec), "--out", str(run),
                        "--epochs", "1", "--batch-size", "16", "--quiet", "--d-model", "20", "--num-heads", "4"],
                       cwd=ROOT, capture_output=True, text=True, timeout=seconds(300))
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "config.json").read_text())["data"]["tracks"] == [20000, 20001]
    shutil.rmtree(rec)  # a run travels without its recordings (as a shipped one does): it keeps its tracks itself
    port = free_port()
    drive = subprocess.Popen([sys.executable, "-m", "scripts.cli", "drive", str(run), "--port", str(port)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = tmp_path / "drive.json"
    try:
        wait_listening(port, drive, BRIDGE_START_S)
        refused = subprocess.run([sys.executable, "-m", "scripts.cli", "sim", "--port", str(port), "--max-steps", "30"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=seconds(120))
        r = subprocess.run([sys.executable, "-m", "scripts.cli", "sim", "--port", str(port), "--max-steps", "30", "--seed", "20002",
                            "--episodes", "2", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=seconds(120))
    finally:
        drive.terminate()
        drive.communicate(timeout=seconds(20))
    assert refused.returncode == 2 and "trained on" in refused.stderr  # 20000 is a recorded track
    assert r.returncode == 0, r.stderr
    assert "unexpected replies 0" in r.stdout and "| 2 |" in r.stdout
    got = json.loads(out.read_text())
    assert got["seeds"] == [20002, 20003] and len(got["returns"]) == 2 and got["episodes"] == 2
    assert got["bridge"]["frames"] == 60 and got["bridge"]["bad"] == {} and 0 < got["round_trip_p50_ms"] <= got["round_trip_p99_ms"]


def test_recording_with_noise_drifts_the_car_and_keeps_the_experts_labels(tmp_path):
    from sim_bridge.carracing_sim import record_training
    from sim_bridge.config import SimConfig

    rows = {}
    for noise in (0.0, 0.5):
        record_training(SimConfig(record=str(tmp_path / f"n{noise}"), episodes=1, max_steps=60, seed=7, noise=noise))
        rows[noise] = read_log(tmp_path / f"n{noise}").samples
    clean, noisy = ([s.steering for s in rows[n]] for n in (0.0, 0.5))
    assert len(clean) == len(noisy) == 60 and clean[0] == noisy[0]  # the same start; the offset acts from the first step on
    assert np.abs(np.array(clean) - np.array(noisy)).max() > 0.05  # the drifted car's expert steers otherwise: back to its line
    with pytest.raises(ConfigError, match="noise must be a number in"):
        SimConfig(noise=2.0)


def test_recording_with_a_policy_share_lets_the_bridge_drive_and_keeps_the_experts_labels(tmp_path):
    from sim_bridge.carracing_sim import record_training
    from sim_bridge.config import SimConfig

    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="nac", d_model=20, num_heads=4)).save(tmp_path / "run", "best", {"train": {}})
    with pytest.raises(ConfigError, match="not both"):
        SimConfig(record=str(tmp_path / "x"), noise=0.1, policy_share=0.5)
    with pytest.raises(ConfigError, match="no bridge answers"):
        record_training(SimConfig(record=str(tmp_path / "x"), port=free_port(), policy_share=0.5, wait=0.5))
    port, proc = serve(tmp_path, "--record", str(tmp_path / "commands"))
    try:
        record_training(SimConfig(record=str(tmp_path / "dagger"), port=port, episodes=1, max_steps=60, seed=7, policy_share=1.0))
    finally:
        proc.terminate()
        proc.communicate(timeout=seconds(20))
    record_training(SimConfig(record=str(tmp_path / "clean"), episodes=1, max_steps=60, seed=7))
    labels, clean, commands = ([s.steering for s in read_log(tmp_path / d).samples] for d in ("dagger", "clean", "commands"))
    assert len(labels) == len(commands) == 60  # the bridge answered every frame of the recording
    assert np.abs(np.array(labels) - np.array(commands)).max() > 0.05  # the label is the expert's, not what the car did
    assert np.abs(np.array(labels) - np.array(clean)).max() > 0.05  # the bridge drove the car elsewhere than the expert would


def test_the_shipped_pilotnet_nac_drives_the_stand_in_and_refuses_its_training_tracks():
    """agents/pretrained/pilotnet-nac, served by `drive` with its defaults, drives a held-out track's first
    300 steps on the road (over a quarter of its tiles) and refuses the tracks it was trained on."""
    from sim_bridge.carracing_sim import drive_autonomous
    from sim_bridge.config import SimConfig
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scripts.cli", "drive", "agents/pretrained/pilotnet-nac", "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        wait_listening(port, proc, BRIDGE_START_S)
        r = drive_autonomous(SimConfig(port=port, seed=40_000, episodes=1, max_steps=300))
        with pytest.raises(ConfigError, match="tracks the bridge's model was trained on"):
            drive_autonomous(SimConfig(port=port, seed=29, episodes=1, max_steps=5))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=seconds(20))
    ep = r["episodes_detail"][0]
    assert r["unexpected_replies"] == 0 and ep["length"] == 300
    assert ep["tiles_visited"] > 0.25 and ep["episode_return"] > 200, ep  # a lap takes the expert 700-950 steps
    assert "target speed 20 mph" in err  # driven at the measured defaults
