"""The live bridge (sim_bridge.server), against a client that behaves as the simulator's Unity client and against a
standard python-socketio client: telemetry parsing, the speed controller, the recorder, one reply per telemetry, one
simulator's state apart from another's, a second simulator refused while recording."""

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
from sim_bridge.round_trips import free_port
from sim_bridge.config import BridgeConfig
from sim_bridge.server import BadTelemetry, DriveRecorder, SpeedController, parse_telemetry
from agents.training.udacity import DRIVE_SPEED
from sim_bridge.standin import UnityLikeClient, telemetry_fields
from sim_bridge.udacity_runs import BRIDGE_START_S, wait_listening
from tests.sim_bridge.bridges import serve
from tests.limits import seconds

ROOT = Path(__file__).parents[2]
FRAME = np.random.default_rng(0).integers(0, 255, (160, 320, 3), dtype=np.uint8)


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
    out, err = proc.communicate(timeout=seconds(20))
    assert "Traceback" not in err, err[-3000:]


def eventually(get, ok, timeout: float = 20.0):
    """get() until ok(its value), for up to `timeout` seconds: wait for the condition, not for a time. Returns the last value."""
    deadline = time.monotonic() + seconds(timeout)
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


def test_two_simulators_at_once_each_drive_with_their_own_state(tmp_path):
    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="nac", d_model=20, num_heads=4)).save(tmp_path / "run", "best", {"train": {}})
    port, proc = serve(tmp_path)
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
        proc.communicate(timeout=seconds(20))


def test_while_recording_a_second_simulator_is_refused_until_the_first_leaves(tmp_path):
    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="nac", d_model=20, num_heads=4)).save(tmp_path / "run", "best", {"train": {}})
    port, proc = serve(tmp_path, "--record", str(tmp_path / "rec"))
    a = UnityLikeClient(port=port)
    b = UnityLikeClient(port=port, timeout=seconds(1.5))
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
            c = UnityLikeClient(port=port, timeout=seconds(1.5))
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
        _, err = proc.communicate(timeout=seconds(20))
    assert "refused a second simulator" in err and err.count("refused a second simulator") == 1


def test_a_standard_socketio_client_works_too(bridge):
    port, _ = bridge
    replies = []
    client = socketio.Client()
    client.on("steer", lambda data: replies.append(data))
    client.connect(f"http://127.0.0.1:{port}", transports=["websocket"])
    try:
        client.emit("telemetry", telemetry_fields(FRAME, 0.0, 0.0, 5.0))
        deadline = time.monotonic() + seconds(10)
        while not replies and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.disconnect()
    assert replies and set(replies[0]) == {"steering_angle", "throttle"}


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
        port, proc = serve(tmp_path, *extra)
        c = UnityLikeClient(port=port)
        try:
            name, reply = c.exchange(telemetry_fields(FRAME, 0.0, 0.0, 18.0))
        finally:
            c.close()
            proc.terminate()
            _, err = proc.communicate(timeout=seconds(20))
        want = expected.update(18.0, float(reply["steering_angle"]), 0.05)
        assert name == "steer" and float(reply["throttle"]) == pytest.approx(want, abs=1e-4), extra
        assert ("predicts" in err) == (not extra)  # the start-up line says which target it drives toward
