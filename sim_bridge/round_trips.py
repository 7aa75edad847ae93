"""`nacdrive bench bridge`: telemetry in -> steer out, as the simulator sees it, over a long drive.

Starts `nacdrive drive RUN` in its own process, drives it with the Unity-like client from this
one (real 320x160 camera frames, lockstep), and reports the round-trip latency percentiles and
the bridge's resident memory over time (to catch growth in a long drive).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim_bridge.standin import UnityLikeClient, telemetry_fields


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sample_frames(n: int = 200) -> list[np.ndarray]:
    """Camera frames from CarRacing in the simulator's shape."""
    from sim_bridge.carracing_sim import make_sim_env, camera

    env = make_sim_env(n)
    env.reset(seed=20000)
    frames = []
    for _ in range(n):
        frames.append(camera(env))
        env.step(np.array([0.0, 0.5, 0.0], np.float32))
    env.close()
    return frames


def bench_bridge(run: str, seconds: float = 60.0) -> dict[str, Any]:
    frames = sample_frames()
    fields = [telemetry_fields(f, 0.0, 0.3, 12.0) for f in frames]
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", "drive", run, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        client = UnityLikeClient(port=port, connect_timeout=60)
        lat: list[float] = []
        rss: list[tuple[float, float]] = []
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            start = time.perf_counter()
            name, _ = client.exchange(fields[i % len(fields)])
            lat.append((time.perf_counter() - start) * 1e3)
            if name != "steer":
                raise RuntimeError(f"the bridge replied {name!r} to a good telemetry")
            i += 1
            if i % 500 == 1:
                rss.append((round(time.monotonic() - t0, 1), round(_rss_mb(proc.pid), 1)))
        rss.append((round(time.monotonic() - t0, 1), round(_rss_mb(proc.pid), 1)))
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    a = np.asarray(lat[20:])  # the first exchanges include connecting
    return {
        "exchanges": len(lat), "seconds": seconds, "fps": len(lat) / seconds,
        "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()),
        "rss_mb": rss,
    }
