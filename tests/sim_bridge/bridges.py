"""What the bridge's tests share: a bridge served from a run folder in a process of its own."""

import os
import subprocess
import sys
from pathlib import Path

from sim_bridge.round_trips import free_port
from sim_bridge.udacity_runs import BRIDGE_START_S, wait_listening

ROOT = Path(__file__).parents[2]


def serve(root: Path, *extra: str) -> tuple[int, subprocess.Popen]:
    """`nacdrive drive ROOT/run` on a free port, with these flags; returns once it listens (the condition, not a time)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", "drive", str(root / "run"), "--port", str(port), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wait_listening(port, proc, BRIDGE_START_S)
    return port, proc
