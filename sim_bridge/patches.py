"""Two start-up replacements the bridge needs from its libraries, each for a measured reason.

1. eventlet's WebSocket server unmasks every received frame one byte at a time in Python
   (`RFC6455WebSocket._apply_mask`): 7.8 ms for a 20 KB telemetry message on this 2-core CPU,
   most of a bridge's telemetry -> steer latency. `fast_apply_mask` XORs the whole payload at
   once with numpy and returns the same bytes (a test compares both on random data) in about
   0.08 ms.
2. The Udacity simulator's Socket.IO client sends Engine.IO PINGs (the Engine.IO 3 direction)
   and python-engineio 4 ignores a client's PING; the client then times the server out. A PING
   from a client is answered with a PONG; nothing else about packet handling changes.

`apply()` installs both once; it is idempotent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_applied = False


def slow_apply_mask(data: bytes, mask: bytes, length: int | None = None, offset: int = 0) -> bytes:
    """eventlet's own algorithm, kept for the comparison test."""
    if length is None:
        length = len(data)
    return b"".join(bytes((data[i] ^ mask[(offset + i) % 4],)) for i in range(length))


def fast_apply_mask(data: bytes, mask: bytes, length: int | None = None, offset: int = 0) -> bytes:
    """The same bytes as slow_apply_mask, computed as one vectorised XOR."""
    if length is None:
        length = len(data)
    if length <= 0:
        return b""
    payload = np.frombuffer(bytes(data[:length]), dtype=np.uint8)
    key = np.frombuffer(bytes(mask[:4]), dtype=np.uint8)
    key = np.roll(key, -(offset % 4))  # byte i uses mask[(offset + i) % 4]
    return (payload ^ np.resize(key, length)).tobytes()


def apply() -> None:
    global _applied
    if _applied:
        return
    import warnings

    from engineio import packet
    from engineio import socket as eio_socket

    with warnings.catch_warnings():  # eventlet is in bugfix mode; the issue asks for it, we know
        warnings.simplefilter("ignore")
        from eventlet.websocket import RFC6455WebSocket

    RFC6455WebSocket._apply_mask = staticmethod(fast_apply_mask)

    original_receive = eio_socket.Socket.receive

    def receive(self: Any, pkt: Any) -> Any:
        if pkt.packet_type == packet.PING:  # Engine.IO 3 clients (the Unity simulator) ping the server
            self.send(packet.Packet(packet.PONG, pkt.data))
            return None
        return original_receive(self, pkt)

    eio_socket.Socket.receive = receive
    _applied = True
