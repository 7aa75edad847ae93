"""PilotNet (nac.pilotnet): its dense layers are the paper's own, and a registry head knows where in the image a
feature lies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nac import ConfigError
from nac.pilotnet import DENSE, PilotNet, PilotNetConfig

REAL = str(Path(__file__).parents[2] / "data" / "udacity-real")


def test_pilotnet_dense_is_pilotnets_own_layers():
    net = PilotNet(PilotNetConfig(head=DENSE))
    assert net.head is None
    assert [m.out_features for m in net.dense if isinstance(m, torch.nn.Linear)] == [100, 50, 10]
    assert net.dense[0].in_features == 64 * 18
    y, speed = net(torch.randint(0, 255, (3, 3, 66, 200), dtype=torch.uint8))
    assert y.shape == (3,) and (y.abs() < 1).all() and speed is None
    y.sum().backward()
    assert net.cnn[0].weight.grad is not None and net.dense[0].weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="unknown head 'mlp'; choose one of dense, nac"):
        PilotNetConfig(head="mlp")


@pytest.mark.parametrize("head", ["nac", "mha"])
def test_a_registry_head_knows_where_in_the_image_a_feature_lies(head, tmp_path):
    """Attention and the mean over columns are blind to order: without the position embedding, a map
    whose columns are reversed (a road on the other side) gives the same steering."""
    torch.manual_seed(0)
    fmap = torch.randn(2, 64, 1, 18)
    mirrored = fmap.flip(-1)
    for positions in (False, True):
        net = PilotNet(PilotNetConfig(head=head, d_model=16, num_heads=4, positions=positions)).eval()
        with torch.no_grad():
            a, b = net.read_map(fmap), net.read_map(mirrored)
        assert torch.allclose(a, b, atol=1e-5) != positions, positions
    net = PilotNet(PilotNetConfig(head=head, d_model=16, num_heads=4, positions=False))
    net.save(tmp_path / "old", "best", {"train": {}})  # as runs were saved before the option: no "positions" in config.json
    cfg = json.loads((tmp_path / "old/config.json").read_text())
    del cfg["net"]["positions"]
    (tmp_path / "old/config.json").write_text(json.dumps(cfg))
    old = PilotNet.load(tmp_path / "old")
    assert not old.config.positions and not hasattr(old, "positions")
