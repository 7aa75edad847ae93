"""`nacdrive bench bridge`: round trips through a live bridge, their latency and the server's memory."""

import torch

from nac.pilotnet import PilotNet, PilotNetConfig


def test_bench_bridge_measures_round_trips_and_memory(tmp_path):
    from sim_bridge.round_trips import bench_bridge

    torch.manual_seed(0)
    PilotNet(PilotNetConfig(head="gru", d_model=16)).save(tmp_path / "run", "best", {"train": {}})
    r = bench_bridge(str(tmp_path / "run"), seconds=2.0)
    assert r["exchanges"] >= 2 and 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert len(r["rss_mb"]) >= 2 and all(m > 0 for _, m in r["rss_mb"])
