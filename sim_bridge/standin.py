"""Stand-ins for the Udacity simulator, so that the bridge can be tested and tried here.

`UnityLikeClient` speaks exactly as the simulator's Unity client does (see UDACITY_SIM.md): a raw
WebSocket to /socket.io/?EIO=4&transport=websocket, no namespace CONNECT packet, Engine.IO PINGs
from the client, every telemetry value a string, and one telemetry sent only after the reply
to the previous one.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import cv2
import numpy as np
import websocket  # websocket-client: a plain WebSocket, no Socket.IO layer of its own

from sim_bridge.config import CONNECT_WAIT


STATS_EVENT = "nacdrive_stats"  # the stand-in asks the bridge for its figures (the real simulator never sends it)

def encode_frame(rgb: np.ndarray, quality: int = 90) -> str:
    """(160, 320, 3) RGB -> base64 JPEG text, as the simulator sends its camera."""
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("frame does not encode as JPEG")
    return base64.b64encode(jpeg.tobytes()).decode("ascii")


def telemetry_fields(rgb: np.ndarray, steering_deg: float, throttle: float, speed_mph: float, comma: bool = False) -> dict[str, str]:
    """The simulator's telemetry object: C# ToString("N4") strings (comma decimals in some locales)."""

    def n4(x: float) -> str:
        s = f"{x:.4f}"
        return s.replace(".", ",") if comma else s

    return {"steering_angle": n4(steering_deg), "throttle": n4(throttle), "speed": n4(speed_mph), "image": encode_frame(rgb)}


class UnityLikeClient:
    """A client that behaves as the simulator's: connect, then telemetry -> one reply, repeat."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4567, timeout: float = 10.0, connect_timeout: float = CONNECT_WAIT) -> None:
        url = f"ws://{host}:{port}/socket.io/?EIO=4&transport=websocket"
        deadline = time.monotonic() + connect_timeout
        while True:  # the simulator retries every few seconds until the server is there
            try:
                self.ws = websocket.create_connection(url, timeout=timeout)
                break
            except (ConnectionRefusedError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        opening = self.ws.recv()
        if not opening.startswith("0"):
            raise ConnectionError(f"expected an Engine.IO OPEN packet, got {opening[:40]!r}")
        self.open = json.loads(opening[1:])
        self.pongs = 0

    def send_raw(self, text: str) -> None:
        self.ws.send(text)

    def send_telemetry(self, fields: Any) -> None:
        self.ws.send("42" + json.dumps(["telemetry", fields]))

    def ping(self) -> None:
        self.ws.send("2")

    def receive_event(self) -> tuple[str, Any]:
        """The next Socket.IO event from the server (answers server PINGs, counts PONGs, skips
        the CONNECT acknowledgement)."""
        while True:
            msg = self.ws.recv()
            if msg == "2":
                self.ws.send("3")
            elif msg.startswith("3"):
                self.pongs += 1
            elif msg.startswith("42"):
                name, *args = json.loads(msg[2:])
                return name, args[0] if args else None
            # "40{...}" (the server taking us as connected) and anything else: skip

    def request(self, event: str) -> dict[str, Any]:
        """Emit `event` with no data and return the payload of the same-named reply (a stand-in
        extension: the real simulator only ever sends telemetry)."""
        self.ws.send("42" + json.dumps([event, {}]))
        while True:
            name, data = self.receive_event()
            if name == event:
                return data or {}

    def exchange(self, fields: Any) -> tuple[str, Any]:
        self.send_telemetry(fields)
        return self.receive_event()

    def wait_pong(self, timeout: float = 5.0) -> bool:
        self.ws.settimeout(timeout)
        before = self.pongs
        try:
            while self.pongs == before:
                msg = self.ws.recv()
                if msg.startswith("3"):
                    self.pongs += 1
                elif msg == "2":
                    self.ws.send("3")
        except websocket.WebSocketTimeoutException:
            return False
        return True

    def close(self) -> None:
        self.ws.close()
