"""Every registry head, and both driving networks around them, run their forward pass, backward pass and
streaming steps on the meta device, where a tensor has a shape and a device but no values: a tensor made on the
CPU inside a forward (one that would cross to the host on a GPU), or a value read back from the device, fails there,
as it would stall or break a GPU run."""

from __future__ import annotations

import pytest
import torch

from nac.driving import DrivingNet, DrivingNetConfig
from nac.heads import HEADS, build_head, head_names
from nac.pilotnet import DENSE, PilotNet, PilotNetConfig

META = torch.device("meta")


@pytest.fixture(autouse=True)
def swap_on_conversion():
    """`.to()` swaps each parameter's tensor in place rather than making a new Parameter (the default for the meta
    device): ncps's LTC keeps its parameters in a dict of its own, which must go on naming the moved ones, as it
    does for a GPU."""
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(before)


@pytest.mark.parametrize("name", head_names())
def test_every_head_runs_forward_backward_and_streams_on_the_meta_device(name):
    attention = HEADS[name].is_attention
    head = build_head(dict(name=name, input_dim=8, d_model=16, num_heads=4, causal=attention)).to(META)
    x = torch.randn(2, 5, 8, device=META, requires_grad=True)
    ts = torch.arange(5.0, device=META).expand(2, 5)
    y = head(x, ts)
    y.sum().backward()
    assert y.device == META and y.shape == (2, 16) and x.grad is not None and x.grad.device == META
    state = head.init_state(2)
    for t in range(3):
        y_t, state = head.step(x[:, t].detach(), state, ts[:, t])
    assert y_t.device == META and y_t.shape == (2, 16)


@pytest.mark.parametrize("net", [
    dict(head="nac", action_space="continuous"),
    dict(head="ltc", action_space="continuous", brake_gate=True),
    dict(head="nac", action_space="discrete", wheel_target=True),
    dict(head="gru", action_space="discrete"),
])
def test_the_driving_network_trains_on_the_meta_device(net):
    model = DrivingNet(DrivingNetConfig(window=4, d_model=16, num_heads=4, **net)).to(META)
    frames = torch.empty(7, 96, 96, 3, dtype=torch.uint8, device=META)
    index = torch.zeros(3, 4, dtype=torch.long, device=META)
    raw = model(frames, torch.zeros(3, 4, device=META), index)
    raw.float().sum().backward()
    assert raw.device == META and all(p.grad is None or p.grad.device == META for p in model.parameters())


@pytest.mark.parametrize("head", [DENSE, "nac"])
def test_pilotnet_trains_on_the_meta_device(head):
    net = PilotNet(PilotNetConfig(head=head, speed_output=True)).to(META)
    steer, speed = net(torch.empty(4, 3, 66, 200, dtype=torch.uint8, device=META))
    (steer.sum() + speed.sum()).backward()
    assert steer.shape == (4,) and speed.device == META


@pytest.mark.parametrize("selection", ["sqrt", "pairwise"])
def test_nac_selections_stream_on_the_meta_device(selection):
    """sqrt selection aligns its blocks to the first key's position, which a stream's cache moves: taken as a number,
    not read from the device."""
    nac = {"selection": selection, "topk": 2, **({"block_size": 2} if selection == "sqrt" else {})}
    head = build_head(dict(name="nac", input_dim=8, d_model=16, num_heads=4, causal=True, window=3, nac=nac)).to(META)
    x = torch.randn(2, 6, 8, device=META)
    head(x).sum()
    state = head.init_state(2)
    for t in range(5):  # past the window: the cache's first key moves on
        y_t, state = head.step(x[:, t], state, None)
    assert y_t.device == META
