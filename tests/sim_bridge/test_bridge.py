"""The live bridge, against a client that behaves as the simulator's Unity client and against a
standard python-socketio client."""

import dataclasses
import json
import shutil
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import socketio
import torch
import websocket

from datasets.udacity import read_log
from nac import ConfigError
from nac.pilotnet import PilotNet, PilotNetConfig
from sim_bridge import patches
from sim_bridge.bench import free_port
from datasets.udacity import recorded_seeds
from sim_bridge.config import BridgeConfig
from sim_bridge.server import BadTelemetry, DriveRecorder, SpeedController, parse_telemetry
from agents.training.udacity import DRIVE_SPEED
from sim_bridge.standin import UnityLikeClient, telemetry_fields
from sim_bridge.study import BRIDGE_START_S, wait_listening

ROOT = Path(__file__).parents[2]
FRAME = np.random.default_rng(0).integers(0, 255, (160, 320, 3), dtype=np.uint8)


def test_fast_unmasking_gives_eventlets_bytes():
    rng = np.random.default_rng(1)
    for length in (0, 1, 3, 4, 5, 1000, 20_001):
        data = rng.integers(0, 256, length + 7, dtype=np.uint8).tobytes()
        mask = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        for offset in range(6):
            for n in (None, length):
                assert patches.fast_apply_mask(data, mask, n, offset) == patches.slow_apply_mask(data, mask, n, offset)
    patches.apply()
    patches.apply()  # idempotent
    from eventlet.websocket import RFC6455WebSocket

    assert RFC6455WebSocket._apply_mask is patches.fast_apply_mask


def test_telemetry_parsing_takes_strings_and_comma_decimals():
    tel = parse_telemetry(telemetry_fields(FRAME, -1.25, 0.2, 9.8765, comma=True))
    assert tel.steering_deg == pytest.approx(-1.25) and tel.speed == pytest.approx(9.8765) and tel.frame.shape == (160, 320, 3)
    assert parse_telemetry({}) is None
    good = telemetry_fields(FRAME, 0, 0, 1)
    cases = [
        ([1, 2], "not an object"),
        ({k: v for k, v in good.items() if k != "speed"}, "missing field"),
        ({**good, "speed": "fast"}, "non-numeric value"),
        ({**good, "speed": "nan"}, "non-numeric value"),
        ({**good, "image": "not base64 at all!"}, "undecodable image"),
        ({**good, "image": telemetry_fields(FRAME[:80, :160], 0, 0, 1)["image"]}, "wrong-sized image"),
    ]
    for data, kind in cases:
        with pytest.raises(BadTelemetry) as exc:
            parse_telemetry(data)
        assert exc.value.kind == kind


def test_the_speed_controller_holds_the_target_and_slows_for_turns():
    c = SpeedController(target=15)
    assert c.update(5, 0.0, 0.05) > 0.9 and c.update(25, 0.0, 0.05) < 0
    straight = SpeedController(target=15).update(10, 0.0, 0.05)
    turning = SpeedController(target=15).update(10, 1.0, 0.05)
    assert turning < straight  # the goal drops in a sharp turn
    held = SpeedController(target=15)
    for _ in range(10_000):
        held.update(0, 0.0, 0.1)  # car held still at full throttle: the integral does not wind up
    assert held.integral == 0
    near = SpeedController(target=15)
    for _ in range(10_000):
        near.update(14, 0.0, 0.1)  # a steady shortfall (drag): the integral grows, to its limit
    assert near.integral == near.integral_limit
    # accelerating from standstill, then the target drops before a bend: the controller brakes
    c = SpeedController(target=25, turn_slowdown=0.0)
    for v in np.linspace(0, 24, 150):
        c.update(float(v), 0.0, 0.02)
    c.target = 15
    assert c.update(22, 0.0, 0.02) < -0.3


def test_recorder_never_overwrites(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("keep")
    with pytest.raises(ConfigError, match="not empty"):
        DriveRecorder(tmp_path / "old")
    assert BridgeConfig().host == "127.0.0.1"


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    root = tmp_path_factory.mktemp("bridge")
    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="nac", d_model=20, num_heads=4)).save(root / "run", "best", {"train": {}})
    port = free_port()
    record = root / "drive"
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", "drive", str(root / "run"), "--port", str(port), "--record", str(record)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wait_listening(port, proc, BRIDGE_START_S)  # the condition, not a time: under load the server takes a while to start
    yield port, record
    proc.terminate()
    out, err = proc.communicate(timeout=20)
    assert "Traceback" not in err, err[-3000:]


def eventually(get, ok, timeout: float = 20.0):
    """get() until ok(its value), for up to `timeout` seconds: wait for the condition, not for a time. Returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = get()
        except FileNotFoundError:  # a recording's log not written yet
            value = None
        if (value is not None and ok(value)) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_the_simulators_client_gets_exactly_one_reply_per_telemetry(bridge):
    port, record = bridge
    c = UnityLikeClient(port=port)  # never sends the namespace CONNECT packet
    try:
        for i in range(5):
            name, reply = c.exchange(telemetry_fields(FRAME, 0.0, 0.1, 3.0 * i, comma=i % 2 == 1))
            assert name == "steer"
            assert isinstance(reply["steering_angle"], str) and isinstance(reply["throttle"], str)
            assert -1 <= float(reply["steering_angle"]) <= 1 and -1 <= float(reply["throttle"]) <= 1
        last = float(reply["steering_angle"])
        assert c.exchange({}) == ("manual", {})
        for bad in ([1, 2], {"image": "x"}, {**telemetry_fields(FRAME, 0, 0, 1), "speed": "n/a"}):
            name, reply = c.exchange(bad)  # a safe command: the last steering held, no throttle
            assert name == "steer" and float(reply["steering_angle"]) == pytest.approx(last) and float(reply["throttle"]) == 0
        c.send_raw('42["telemetry",{broken')
        name, reply = c.receive_event()
        assert name == "steer" and float(reply["throttle"]) == 0
        c.ping()
        assert c.wait_pong(5)  # Engine.IO 3 style client PING answered
        name, _ = c.exchange(telemetry_fields(FRAME, 0.0, 0.1, 3.0))
        assert name == "steer"  # still serving after all of that
    finally:
        c.close()
    rec = eventually(lambda: read_log(record), lambda rec: len(rec.samples) >= 6)  # the recording is in the simulator's own format
    assert len(rec.samples) == 6 and not rec.skipped


def _serve(root: Path, *extra: str):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", "drive", str(root / "run"), "--port", str(port), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wait_listening(port, proc, BRIDGE_START_S)
    return port, proc


def test_two_simulators_at_once_each_drive_with_their_own_state(tmp_path):
    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="nac", d_model=20, num_heads=4)).save(tmp_path / "run", "best", {"train": {}})
    port, proc = _serve(tmp_path)
    a = UnityLikeClient(port=port)
    b = UnityLikeClient(port=port)
    try:
        for _ in range(20):  # A is held still far below the target: its controller's integral winds up
            name, reply_a = a.exchange(telemetry_fields(FRAME, 0.0, 0.0, 0.0))
            assert name == "steer"
        name, reply_b = b.exchange(telemetry_fields(FRAME, 0.0, 0.0, DRIVE_SPEED))  # B, at the target speed, for the first time
        steer_b = float(reply_b["steering_angle"])
        fresh = SpeedController().update(DRIVE_SPEED, steer_b, 0.05)
        assert float(reply_b["throttle"]) == pytest.approx(fresh, abs=1e-4)  # B's controller is its own, fresh
        name, safe_a = a.exchange([1, 2])  # a safe reply holds A's own last steering, not B's
        assert float(safe_a["steering_angle"]) == pytest.approx(float(reply_a["steering_angle"]), abs=1e-4)
    finally:
        a.close()
        b.close()
        proc.terminate()
        proc.communicate(timeout=20)


def test_while_recording_a_second_simulator_is_refused_until_the_first_leaves(tmp_path):
    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="nac", d_model=20, num_heads=4)).save(tmp_path / "run", "best", {"train": {}})
    port, proc = _serve(tmp_path, "--record", str(tmp_path / "rec"))
    a = UnityLikeClient(port=port)
    b = UnityLikeClient(port=port, timeout=1.5)
    try:
        assert a.exchange(telemetry_fields(FRAME, 0.0, 0.0, 5.0))[0] == "steer"
        b.send_telemetry(telemetry_fields(FRAME, 0.0, 0.0, 5.0))
        with pytest.raises(websocket.WebSocketTimeoutException):  # no steer for the second simulator: it was refused
            while True:
                name, _ = b.receive_event()
                assert name != "steer"
        assert a.exchange(telemetry_fields(FRAME, 0.0, 0.0, 5.0))[0] == "steer"  # the first drives on
        a.close()

        def served() -> bool:  # a new simulator is served once the server has seen the first leave
            c = UnityLikeClient(port=port, timeout=1.5)
            try:
                return c.exchange(telemetry_fields(FRAME, 0.0, 0.0, 5.0))[0] == "steer"
            except websocket.WebSocketTimeoutException:
                return False
            finally:
                c.close()

        assert eventually(served, bool)
    finally:
        b.close()
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert "refused a second simulator" in err and err.count("refused a second simulator") == 1


def test_a_standard_socketio_client_works_too(bridge):
    port, _ = bridge
    replies = []
    client = socketio.Client()
    client.on("steer", lambda data: replies.append(data))
    client.connect(f"http://127.0.0.1:{port}", transports=["websocket"])
    try:
        client.emit("telemetry", telemetry_fields(FRAME, 0.0, 0.0, 5.0))
        deadline = time.monotonic() + 10
        while not replies and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.disconnect()
    assert replies and set(replies[0]) == {"steering_angle", "throttle"}


def test_the_stand_in_simulator_closes_the_loop(tmp_path):
    """sim --record (expert drives) -> train --task udacity -> drive + sim (autonomous)."""
    rec = tmp_path / "rec"
    r = subprocess.run([sys.executable, "-m", "scripts.cli", "sim", "--record", str(rec), "--episodes", "2", "--max-steps", "40"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(read_log(rec).samples) == 80
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "scripts.cli", "train", "--task", "udacity", "--data", str(rec), "--out", str(run),
                        "--epochs", "1", "--batch-size", "16", "--quiet", "--d-model", "20", "--num-heads", "4"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
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
                                 cwd=ROOT, capture_output=True, text=True, timeout=120)
        r = subprocess.run([sys.executable, "-m", "scripts.cli", "sim", "--port", str(port), "--max-steps", "30", "--seed", "20002",
                            "--episodes", "2", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        drive.terminate()
        drive.communicate(timeout=20)
    assert refused.returncode == 2 and "trained on" in refused.stderr  # 20000 is a recorded track
    assert r.returncode == 0, r.stderr
    assert "unexpected replies 0" in r.stdout and "| 2 |" in r.stdout
    got = json.loads(out.read_text())
    assert got["seeds"] == [20002, 20003] and len(got["returns"]) == 2 and got["episodes"] == 2
    assert got["bridge"]["frames"] == 60 and got["bridge"]["bad"] == {} and 0 < got["round_trip_p50_ms"] <= got["round_trip_p99_ms"]


def test_bench_bridge_measures_round_trips_and_memory(tmp_path):
    from sim_bridge.bench import bench_bridge

    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="gru", d_model=16)).save(tmp_path / "run", "best", {"train": {}})
    r = bench_bridge(str(tmp_path / "run"), seconds=2.0)
    assert r["exchanges"] >= 2 and 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert len(r["rss_mb"]) >= 2 and all(m > 0 for _, m in r["rss_mb"])


def test_a_udacity_study_trains_pilotnet_heads_and_drives_them_through_the_bridge(tmp_path):
    """study --task udacity: one stand-in recording, PilotNet runs (its own dense layers and a
    registry head), every held-out episode driven by the stand-in through a bridge process."""
    from agents.studies.config import StudyConfig
    from agents.studies.study import run_study
    from agents.studies.report import build
    from sim_bridge.study import UDACITY

    cfg = StudyConfig(out=str(tmp_path / "s"), task="udacity", heads=["dense", "gru"], seeds=1, demos=2, episodes=2,
                      seed_start=100, max_steps=40, workers=2, speed=20.0, turn_slowdown=0.8,
                      variants={"base": {"epochs": 1, "batch_size": 16, "net": {"d_model": 16}}})
    data = run_study(cfg, quiet=True, kind=UDACITY)
    assert sorted(data["runs"]) == ["base/dense/seed0", "base/gru/seed0"]
    assert all(r["done"] and r["val_loss"] is not None for r in data["runs"].values())
    assert recorded_seeds([str(tmp_path / "s/demos")]) == [0, 1]
    eps = [e for e in data["episodes"] if e["run"] != "expert"]
    assert sorted((e["run"], e["episode_seed"]) for e in eps) == [(r, s) for r in sorted(data["runs"]) for s in (100, 101)]
    assert all(e["length"] == 40 and e["step_ms_p50"] > 0 for e in eps)  # driven through a bridge, every step answered
    again = run_study(cfg, quiet=True, kind=UDACITY)
    assert again["episodes"] == data["episodes"]
    assert UDACITY.episode_job(cfg, "RUN", "none", (100,)) == [("RUN", 20.0, 40, 100, 0.8)]  # each episode's bridge gets the study's controller
    with pytest.raises(ConfigError, match="was made with turn_slowdown=0.8, not 0.5"):
        run_study(dataclasses.replace(cfg, turn_slowdown=0.5), quiet=True, kind=UDACITY)
    build(tmp_path / "s", reps=100)
    text = (tmp_path / "s/report/report.md").read_text()
    assert "validation MSE" in text and "| dense | 1 x 2 |" in text
    assert "- base: epochs=1, lr=" in text and "dagger" not in text  # the recipe as PilotNet runs have it: no DAgger fields
    with pytest.raises(ConfigError, match="no --perturb"):
        StudyConfig(out="x", task="udacity", levels=["none", "drop=0.2"])
    with pytest.raises(ConfigError, match=r"turn slowdown must be in \[0, 1\) \(got 1.0\)"):
        StudyConfig(out="x", task="udacity", turn_slowdown=1.0)
    with pytest.raises(ConfigError, match="dagger_rounds not a recipe field of PilotNet runs"):
        StudyConfig(out="x", task="udacity", variants={"b": {"dagger_rounds": 0}})
    with pytest.raises(ConfigError, match="needs its StudyKind"):
        run_study(StudyConfig(out=str(tmp_path / "t"), task="udacity"))


def test_a_run_that_predicts_its_speed_drives_toward_that_speed_unless_told_one(tmp_path):
    torch.manual_seed(0)
    net = PilotNet(PilotNetConfig(head="gru", d_model=16, speed_output=True))
    with torch.no_grad():
        net.out.weight[1].zero_()
        net.out.bias[1] = 0.0  # sigmoid(0) * SPEED_MAX: the run predicts 20 mph for every frame
    steer, speed = net(torch.zeros(2, 3, 66, 200, dtype=torch.uint8))
    assert speed.tolist() == pytest.approx([20.0, 20.0]) and steer.shape == (2,)
    net.save(tmp_path / "run", "best", {"train": {}})
    for extra, expected in (((), SpeedController(target=20.0, turn_slowdown=0.0)), (("--speed", "15"), SpeedController(target=15.0)),
                            (("--speed", "25", "--turn-slowdown", "0.8"), SpeedController(target=25.0, turn_slowdown=0.8))):
        port, proc = _serve(tmp_path, *extra)
        c = UnityLikeClient(port=port)
        try:
            name, reply = c.exchange(telemetry_fields(FRAME, 0.0, 0.0, 18.0))
        finally:
            c.close()
            proc.terminate()
            _, err = proc.communicate(timeout=20)
        want = expected.update(18.0, float(reply["steering_angle"]), 0.05)
        assert name == "steer" and float(reply["throttle"]) == pytest.approx(want, abs=1e-4), extra
        assert ("predicts" in err) == (not extra)  # the start-up line says which target it drives toward


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
    with pytest.raises(ConfigError, match="noise must be in"):
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
    port, proc = _serve(tmp_path, "--record", str(tmp_path / "commands"))
    try:
        record_training(SimConfig(record=str(tmp_path / "dagger"), port=port, episodes=1, max_steps=60, seed=7, policy_share=1.0))
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    record_training(SimConfig(record=str(tmp_path / "clean"), episodes=1, max_steps=60, seed=7))
    labels, clean, commands = ([s.steering for s in read_log(tmp_path / d).samples] for d in ("dagger", "clean", "commands"))
    assert len(labels) == len(commands) == 60  # the bridge answered every frame of the recording
    assert np.abs(np.array(labels) - np.array(commands)).max() > 0.05  # the label is the expert's, not what the car did
    assert np.abs(np.array(labels) - np.array(clean)).max() > 0.05  # the bridge drove the car elsewhere than the expert would


def test_a_udacity_episode_whose_bridge_dies_is_driven_again(tmp_path, monkeypatch):
    from sim_bridge import study

    calls = []

    def flaky(job):
        calls.append(job)
        if len(calls) == 1:
            raise websocket.WebSocketConnectionClosedException("Connection to remote host was lost.")
        return {"return": 1.0}

    monkeypatch.setattr(study, "_episode_once", flaky)
    assert study.episode(("run", None, 10, 5)) == {"return": 1.0} and len(calls) == 2
    monkeypatch.setattr(study, "_episode_once", lambda job: (_ for _ in ()).throw(RuntimeError("the bridge exited (1)")))
    with pytest.raises(RuntimeError, match="seed 5: the bridge failed 3 times"):
        study.episode(("run", None, 10, 5))


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
        _, err = proc.communicate(timeout=20)
    ep = r["episodes_detail"][0]
    assert r["unexpected_replies"] == 0 and ep["length"] == 300
    assert ep["tiles_visited"] > 0.25 and ep["episode_return"] > 200, ep  # a lap takes the expert 700-950 steps
    assert "target speed 20 mph" in err  # driven at the measured defaults
