"""Helpers for the data-parallel tests: run a TrainConfig on two gloo processes under torchrun (a free port of its
own: --standalone) and read what each rank ended with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.limits import seconds

ROOT = Path(__file__).parents[3]


def ranks_digests(cfg: dict, processes: int = 2) -> list[dict]:
    """Train cfg on `processes` gloo ranks; by rank, its parameter digest after training ("digest") and the figures of
    its last validation ("validation"). Every rank must have ended its process group when `train` returned: one left
    alive may abort the process at exit (SIGABRT from gloo's threads), a failure that comes only now and then."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
           str(Path(__file__).with_name("ddp_ranks.py")), json.dumps(cfg)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds(300), env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    out = Path(cfg["out"])
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(processes)]
    assert not any(r["group_alive"] for r in ranks), "train returned with the process group alive"
    return ranks
