"""Run by torchrun in the data-parallel tests: trains the TrainConfig given as JSON (argv[1]) through
`agents.training.trainers.train` and writes, per rank, a digest of the network's parameters after training to
OUT/rank{R}.json (OUT the config's out), with the figures of its last validation, so that a test can compare what
every process ended with (rank 0 alone saves weights), and whether its process group was still alive once `train`
returned ("group_alive": a process that exits with it alive may abort at interpreter shutdown)."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

from agents.training import bc, loop, udacity
from agents.training.loop import TrainConfig
from agents.training.trainers import train


def digest(net: torch.nn.Module) -> str:
    return hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in net.parameters())).hexdigest()


def main() -> None:
    cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
    fit, record = loop.fit, {}

    def fit_and_record(task, cfg, dist_info, *args, **kwargs):  # the task's net, as this rank ends with it (k-fold: the last fold's)
        seen = {}
        validate = task.validate

        def recorded(device, share):
            seen["validation"] = validate(device, share)
            return seen["validation"]

        task.validate = recorded
        out = fit(task, cfg, dist_info, *args, **kwargs)
        record.update(rank=dist_info.rank, digest=digest(task.net), **seen)
        return out

    bc.fit = udacity.fit = fit_and_record  # the trainers call the loop by this name
    train(cfg, quiet=True)
    with open(os.path.join(cfg.out, f"rank{record['rank']}.json"), "w") as f:
        json.dump({**record, "group_alive": dist.is_initialized()}, f)


if __name__ == "__main__":
    main()
