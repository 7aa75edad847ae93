"""The live bridge to the Udacity simulator: a python-socketio server under eventlet that answers
every `telemetry` with exactly one `steer` (or `manual`), as ../shared/UDACITY_SIM.md describes.

- Works with the simulator's own client (no namespace CONNECT packet, Engine.IO 3 style PINGs,
  string-valued fields, maybe comma decimals) and with a standard python-socketio client.
- Bad telemetry and model errors never kill the server and never leave the simulator waiting:
  the reply is a safe command (the last steering held, zero throttle), counted by kind and
  logged once per kind.
- Throttle comes from a PI speed controller toward the target speed, lowered in sharp turns.
- A status line shows frames per second, latency p50/p99 (telemetry in to steer out) and the
  bad-frame counts.
- One drive per connection: each connected simulator has its own speed controller, last
  steering, clock and policy state (a copy of the policy), so two clients at once never steer
  each other. While recording, a second simulator is refused (one recording, one drive), with a
  log line saying so; it is served once the first has disconnected.
"""

from __future__ import annotations

import base64
import binascii
import copy
import logging
import math
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import cv2
import numpy as np
import socketio

from nac.checkpoint import crash_point, holds_anything, write_bytes
from nac.config import ConfigError
from agents.training.udacity import DRIVE_SPEED, TURN_SLOWDOWN
from sim_bridge.config import BridgeConfig
from sim_bridge import patches
from sim_bridge.standin import STATS_EVENT

log = logging.getLogger("nacdrive.bridge")
FRAME_SHAPE = (160, 320, 3)  # the simulator's centre camera


class BadTelemetry(ValueError):
    """A telemetry message the bridge cannot drive from; `kind` names what was wrong."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}{': ' + detail if detail else ''}")
        self.kind = kind


def parse_number(value: Any, name: str) -> float:
    """The simulator sends numbers as strings, maybe with a comma as decimal separator."""
    if isinstance(value, bool):
        raise BadTelemetry("non-numeric value", f"{name}={value!r}")
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        try:
            x = float(value.strip().replace(",", "."))
        except ValueError:
            raise BadTelemetry("non-numeric value", f"{name}={value[:20]!r}") from None
    else:
        raise BadTelemetry("non-numeric value", f"{name} is {type(value).__name__}")
    if not math.isfinite(x):
        raise BadTelemetry("non-numeric value", f"{name}={value!r}")
    return x


@dataclass
class Telemetry:
    frame: np.ndarray  # (160, 320, 3) RGB
    jpeg: bytes
    steering_deg: float
    throttle: float
    speed: float  # mph


def parse_telemetry(data: Any) -> Telemetry | None:
    """None for the empty telemetry of manual driving; BadTelemetry for anything unusable."""
    if not isinstance(data, dict):
        raise BadTelemetry("not an object", type(data).__name__)
    if not data:
        return None
    missing = [k for k in ("steering_angle", "throttle", "speed", "image") if k not in data]
    if missing:
        raise BadTelemetry("missing field", ", ".join(missing))
    steering, throttle, speed = (parse_number(data[k], k) for k in ("steering_angle", "throttle", "speed"))
    if not isinstance(data["image"], str):
        raise BadTelemetry("undecodable image", "image is not a string")
    try:
        jpeg = base64.b64decode(data["image"], validate=False)
    except (binascii.Error, ValueError):
        raise BadTelemetry("undecodable image", "not base64") from None
    bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR) if jpeg else None
    if bgr is None:
        raise BadTelemetry("undecodable image", "not a JPEG / PNG")
    if bgr.shape != FRAME_SHAPE:
        raise BadTelemetry("wrong-sized image", f"{bgr.shape[1]}x{bgr.shape[0]}, expected 320x160")
    return Telemetry(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), jpeg, steering, throttle, speed)


@dataclass
class SpeedController:
    """PI control of the accelerator toward a target speed, lowered in sharp turns.

    kp: throttle per mph of error (0.1: 10 mph short of the target is full throttle);
    ki: throttle per mph-second of accumulated error, to remove the steady shortfall that drag
    leaves under pure P control. Anti-windup: the integral does not grow while the output is
    saturated in the direction of the error (accelerating from standstill at full throttle), and
    it is clamped to +-integral_limit, at most ki * integral_limit = 0.3 of throttle. Without
    that, the integral wound up while the car accelerated held the throttle open when the target
    dropped before a bend: measured, the stand-in left the road at the first bend at every target
    above 15 mph. turn_slowdown: at full steering lock the target drops by this share.
    """

    target: float = DRIVE_SPEED
    kp: float = 0.1
    ki: float = 0.05
    turn_slowdown: float = TURN_SLOWDOWN
    integral_limit: float = 6.0  # mph-seconds
    integral: float = 0.0

    def update(self, speed: float, steering: float, dt: float) -> float:
        goal = self.target * (1.0 - self.turn_slowdown * min(1.0, abs(steering)))
        error = goal - speed
        raw = self.kp * error + self.ki * self.integral
        if not (raw >= 1.0 and error > 0 or raw <= -1.0 and error < 0):
            self.integral = float(np.clip(self.integral + error * dt, -self.integral_limit, self.integral_limit))
        return float(np.clip(self.kp * error + self.ki * self.integral, -1.0, 1.0))


class DriveRecorder:
    """Frames and a driving_log.csv in the simulator's own training-mode format (no header,
    absolute paths, ", " between fields), so a recorded drive can be trained on and rendered.
    The steering column is the command sent for that frame, normalised to [-1, 1]; there are
    no side cameras in telemetry, so their columns are empty. Never deletes anything: an
    existing non-empty folder is refused."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory).resolve()
        if holds_anything(self.dir):
            raise ConfigError(f"{self.dir} is not empty; record into a new folder (nothing is ever overwritten)")
        (self.dir / "IMG").mkdir(parents=True, exist_ok=True)
        self._csv = open(self.dir / "driving_log.csv", "a", newline="")
        self.rows = 0

    def add(self, jpeg: bytes, steering: float, throttle: float, speed: float) -> None:
        stamp = datetime.now().strftime("%Y_%m_%d_%H_%M_%S_%f")[:-3]
        path = self.dir / "IMG" / f"center_{stamp}_{self.rows:06d}.jpg"
        write_bytes(path, jpeg, "recorded frame")  # whole before its row names it
        brake = max(0.0, -throttle)
        self._csv.write(f"{path}, , , {steering:.6f}, {max(0.0, throttle):.6f}, {brake:.6f}, {speed:.4f}\n")
        self._csv.flush()  # a row is written whole or, cut by a kill, without its line end (the loader skips such a row)
        crash_point("recorded row")
        self.rows += 1

    def close(self) -> None:
        self._csv.close()


@dataclass
class _Drive:
    """What one connected simulator's drive keeps to itself."""

    policy: Any  # its own copy: a head with temporal state must see only this drive's frames
    controller: SpeedController
    last_steer: float = 0.0
    last_t: float | None = None


class _SimulatorServer(socketio.Server):
    """python-socketio 5 server that also accepts the simulator's client.

    That client never sends the namespace CONNECT packet `40`, so python-socketio would drop
    its events as "not connected to namespace /". Here an event on "/" from a client that has
    not connected is taken as its connection (standard clients, which do send `40`, are
    unaffected). A packet that does not parse (broken JSON) is handed to `on_broken`, so the
    simulator still gets its one reply.
    """

    def __init__(self, on_broken: Callable[[str], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_broken = on_broken

    def _handle_event(self, eio_sid: str, namespace: str | None, id: Any, data: Any) -> None:
        ns = namespace or "/"
        if ns == "/" and not self.manager.is_connected(self.manager.sid_from_eio_sid(eio_sid, ns), ns):
            self._handle_connect(eio_sid, ns, None)
        super()._handle_event(eio_sid, namespace, id, data)

    def _handle_eio_message(self, eio_sid: str, data: Any) -> None:
        try:
            super()._handle_eio_message(eio_sid, data)
        except ValueError:  # packet.decode failed: broken JSON or an unknown packet type
            ns = "/"
            if not self.manager.is_connected(self.manager.sid_from_eio_sid(eio_sid, ns), ns):
                self._handle_connect(eio_sid, ns, None)
            self._on_broken(self.manager.sid_from_eio_sid(eio_sid, ns))


class DriveBridge:
    """Owns the server, the policy, the controller, the statistics and the recorder."""

    def __init__(self, policy: Any, cfg: BridgeConfig, out: Any = sys.stderr, training_seeds: list[int] | None = None) -> None:
        patches.apply()
        policy.select_action(np.zeros(FRAME_SHAPE, np.uint8))  # warm-up: the first inference is slow
        self.policy, self.cfg, self.out = policy, cfg, out
        self.drives: dict[str, _Drive] = {}  # by Socket.IO sid
        self.refused: set[str] = set()
        self.recorder = DriveRecorder(cfg.record) if cfg.record else None
        self.sio = _SimulatorServer(self._broken, async_mode="eventlet", logger=False, engineio_logger=False)
        self.app = socketio.WSGIApp(self.sio)
        self.latencies: deque[float] = deque(maxlen=2000)  # ms, the most recent replies
        self.bad: Counter[str] = Counter()
        self.frames = 0
        self.training_seeds = list(training_seeds or [])  # tracks the model was trained on (stand-in recordings)
        # the controller follows the speed the policy predicts for each frame, or a fixed target
        self.learned_speed = cfg.speed is None and bool(getattr(policy, "predicts_speed", False))
        self.target_speed = cfg.speed or DRIVE_SPEED
        self.sio.on("connect", self._connect)
        self.sio.on(STATS_EVENT, self._stats)
        self.sio.on("disconnect", self._disconnect)
        self.sio.on("telemetry", self._telemetry)

    # ------------------------------------------------------------------ events
    def _connect(self, sid: str, environ: dict, auth: Any = None) -> bool:
        if self.recorder is not None and self.drives and sid not in self.drives:
            if sid not in self.refused:  # the simulator's client retries on every telemetry: say it once
                self.refused.add(sid)
                print(f"\nrefused a second simulator ({sid}): recording one drive at a time; it is served once "
                      f"{', '.join(self.drives)} disconnects", file=self.out, flush=True)
            return False
        self.refused.discard(sid)
        self._drive(sid)
        log.info("simulator connected (%s)", sid)
        return True

    def _disconnect(self, sid: str, reason: Any = None) -> None:
        self.drives.pop(sid, None)
        log.info("simulator disconnected (%s)", sid)

    def _drive(self, sid: str) -> _Drive:
        drive = self.drives.get(sid)
        if drive is None:  # an event that raced its connect
            if self.learned_speed:  # the prediction already slows for bends: no further cut by the steering
                controller = SpeedController(target=DRIVE_SPEED, turn_slowdown=0.0)
            else:
                controller = SpeedController(target=self.target_speed, turn_slowdown=self.cfg.turn_slowdown)
            drive = self.drives[sid] = _Drive(copy.deepcopy(self.policy), controller)
        return drive

    def _count(self, kind: str, detail: str) -> None:
        if self.bad[kind] == 0:  # each kind once; the status line keeps the counts
            print(f"\nbad telemetry ({kind}): {detail}; replying with a safe command (counted from now on)", file=self.out, flush=True)
        self.bad[kind] += 1

    def _reply(self, sid: str, steer: float, throttle: float) -> None:
        self.sio.emit("steer", {"steering_angle": f"{steer:.4f}", "throttle": f"{throttle:.4f}"}, to=sid)

    def _safe(self, sid: str) -> None:
        """Hold this drive's last steering, no throttle."""
        self._reply(sid, self._drive(sid).last_steer, 0.0)

    def _broken(self, sid: str) -> None:
        if sid in self.refused:
            return
        self._count("broken JSON", "a packet that does not parse")
        self._safe(sid)

    def _telemetry(self, sid: str, data: Any = None, *rest: Any) -> None:
        t0 = time.perf_counter()
        try:
            tel = parse_telemetry(data)
        except BadTelemetry as exc:
            self._count(exc.kind, str(exc))
            self._safe(sid)
            return
        if tel is None:  # a person is driving
            self.sio.emit("manual", {}, to=sid)
            return
        drive = self._drive(sid)
        try:
            steer = float(np.clip(float(drive.policy.select_action(tel.frame)), -self.cfg.max_steer, self.cfg.max_steer))
            if not math.isfinite(steer):
                raise ValueError("the model returned a non-finite steering")
            if self.learned_speed:
                target = float(drive.policy.last["speed"])
                if not math.isfinite(target):
                    raise ValueError("the model returned a non-finite speed")
                drive.controller.target = target
        except Exception as exc:  # any model failure: the simulator must still get its reply
            self._count("model error", f"{type(exc).__name__}: {exc}")
            self._safe(sid)
            return
        now = time.monotonic()
        dt = 0.05 if drive.last_t is None else min(0.5, now - drive.last_t)
        drive.last_t = now
        throttle = drive.controller.update(tel.speed, steer, dt)
        self._reply(sid, steer, throttle)
        drive.last_steer = steer
        self.frames += 1
        self.latencies.append((time.perf_counter() - t0) * 1e3)
        if self.recorder is not None:
            self.recorder.add(tel.jpeg, steer, throttle, tel.speed)

    def _stats(self, sid: str, data: Any = None) -> None:
        """The bridge's figures, for the stand-in simulator's report (never sent by the real simulator)."""
        lat = np.asarray(self.latencies) if self.latencies else np.zeros(1)
        self.sio.emit(STATS_EVENT, {
            "frames": self.frames, "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "bad": dict(self.bad), "training_seeds": self.training_seeds,
        }, to=sid)

    # ------------------------------------------------------------------ status and serving
    def status(self, fps: float) -> str:
        lat = np.asarray(self.latencies) if self.latencies else np.zeros(1)
        bad = ", ".join(f"{k} {v}" for k, v in sorted(self.bad.items())) or "none"
        return f"{fps:5.1f} fps | latency p50 {np.percentile(lat, 50):5.1f} ms p99 {np.percentile(lat, 99):5.1f} ms | frames {self.frames} | bad: {bad}"

    def _status_loop(self) -> None:
        last_frames, last_t = 0, time.monotonic()
        while True:
            self.sio.sleep(self.cfg.status_every)
            now = time.monotonic()
            fps = (self.frames - last_frames) / max(1e-6, now - last_t)
            last_frames, last_t = self.frames, now
            print(f"\r{self.status(fps)}", end="", file=self.out, flush=True)

    def serve(self) -> None:
        import eventlet
        import eventlet.wsgi

        try:
            listener = eventlet.listen((self.cfg.host, self.cfg.port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {self.cfg.host}:{self.cfg.port} ({exc.strerror}); is another bridge running?") from None
        speed = "the speed the model predicts for each frame" if self.learned_speed else f"{self.target_speed:g} mph"
        print(f"bridge listening on {self.cfg.host}:{self.cfg.port}, target speed {speed}; start the simulator in autonomous mode "
              "(Ctrl-C stops)", file=self.out, flush=True)
        if self.cfg.status_every > 0:
            self.sio.start_background_task(self._status_loop)
        try:
            eventlet.wsgi.server(listener, self.app, log_output=False, log=logging.getLogger("nacdrive.wsgi"))
        finally:
            if self.recorder is not None:
                self.recorder.close()
                print(f"\nrecorded {self.recorder.rows} frames into {self.recorder.dir}", file=self.out)


def serve_run(run: str, cfg: BridgeConfig, weights: str = "best", out: Any = sys.stderr) -> None:
    """Serve the simulator with a trained `--task udacity` run (`nacdrive drive`; the Udacity study's
    bridge processes): the model on one thread, the tracks it was trained on (training_tracks) refused."""
    import torch

    from agents.training.udacity import SteeringPolicy, training_tracks

    torch.set_num_threads(1)  # one core for the model: the simulator (or sim) needs the other
    DriveBridge(SteeringPolicy.from_run(run, weights), cfg, out=out, training_seeds=training_tracks(run)).serve()
