"""Every head in the registry: one interface, streaming, timestamps, and it learns."""

import pytest
import torch

from nac import ConfigError
from nac.heads import HeadConfig, build_head, head_names

ALL = head_names()
NAC_ABLATIONS = {"nac-2k", "nac-32k", "nac-02s", "nac-09s", "nac-09sfc", "nac-05sfc", "nac-02sfc", "nac-phi-none", "nac-phi-tanh", "nac-euler", "nac-steady", "nac-const"}
TIMED = {n for n in ALL if n.startswith("nac")} | {"cfc", "ltc", "ctrnn", "mha-rope"}


def test_the_registry_holds_every_head_the_paper_compares():
    assert set(ALL) == {"nac", "nac-pw", "nac-fc", "rnn", "lstm", "gru", "ctrnn", "cfc", "ltc", "mha", "mha-rope", "attention"} | NAC_ABLATIONS


@pytest.mark.parametrize("name", ALL)
def test_one_interface_last_step_and_sequences(name):
    x = torch.randn(3, 6, 10)
    last = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4)
    seq = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4, return_sequences=True)
    seq.load_state_dict(last.state_dict())
    last.eval(), seq.eval()
    with torch.no_grad():
        y_last, y_seq = last(x), seq(x)
    assert y_last.shape == (3, 5) and y_seq.shape == (3, 6, 5)
    if not (name in ("mha", "mha-rope", "attention") or name.startswith("nac")):
        return  # non-causal attention: the last row of a full pass differs from nothing here
    assert torch.allclose(y_last, y_seq[:, -1], atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_windows_of_steps_mapped_once_give_what_the_head_gives(name):
    """embed_steps maps each step alone: overlapping windows of steps mapped once each (as training shares a
    batch's frames) give the outputs of the head on the windows themselves."""
    head = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4).eval()
    steps, ts = torch.randn(9, 10), torch.cumsum(torch.rand(9) + 0.3, 0)
    index = torch.tensor([[0, 1, 2, 3], [2, 3, 4, 5], [5, 6, 7, 8]])
    with torch.no_grad():
        mapped = head.embed_steps(steps)
        shared = head.over_steps(mapped[index], ts[index])
        whole = head(steps[index], ts[index])
    assert mapped.shape[0] == 9
    assert torch.allclose(shared, whole, atol=1e-6)
    if name in ("nac", "mha", "mha-rope", "attention"):  # heads that begin with input projections map to their width
        assert mapped.shape[1] != 10


@pytest.mark.parametrize("name", ALL)
def test_streaming_equals_running_the_whole_sequence(name):
    head = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4, return_sequences=True, causal=True).eval()
    x = torch.randn(2, 7, 10)
    ts = torch.cumsum(torch.rand(2, 7) + 0.3, 1)
    with torch.no_grad():
        full = head(x, ts)
        state, outs = head.init_state(2), []
        for i in range(7):
            y, state = head.step(x[:, i], state, ts[:, i])
            outs.append(y)
    assert torch.allclose(torch.stack(outs, 1), full, atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_a_window_limits_every_head_to_its_last_steps(name):
    """With window=3, each step's output depends only on its last 3 steps, in a full pass and
    in streaming alike, and the last-step output equals running the last 3 steps alone."""
    torch.manual_seed(0)
    head = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4, return_sequences=True, causal=True, window=3).eval()
    x = torch.randn(2, 7, 10)
    ts = torch.cumsum(torch.rand(2, 7) + 0.3, 1)
    with torch.no_grad():
        full = head(x, ts)
        x2 = x.clone()
        x2[:, :3] = torch.randn(2, 3, 10)  # outside the windows of steps 5 and 6
        changed = head(x2, ts)
        state, outs = head.init_state(2), []
        for i in range(7):
            y, state = head.step(x[:, i], state, ts[:, i])
            outs.append(y)
        alone = head(x[:, 4:], ts[:, 4:])[:, -1]
    assert torch.allclose(torch.stack(outs, 1), full, atol=1e-5)
    assert torch.allclose(full[:, 5:], changed[:, 5:], atol=1e-5)
    assert not torch.allclose(full[:, 3], changed[:, 3], atol=1e-4)
    assert torch.allclose(alone, full[:, -1], atol=1e-5)
    last = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4, causal=True, window=3).eval()
    last.load_state_dict(head.state_dict())
    with torch.no_grad():
        assert torch.allclose(last(x, ts), full[:, -1], atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_heads_that_accept_time_use_it_and_the_others_ignore_it(name):
    head = build_head(name, input_dim=10, d_model=16, num_heads=4, causal=True).eval()
    assert head.accepts_time == (name in TIMED)
    x = torch.randn(2, 6, 10)
    ts = torch.cumsum(torch.rand(2, 6) * 4 + 0.1, 1)
    with torch.no_grad():
        changed = not torch.allclose(head(x, ts), head(x), atol=1e-4)
    assert changed == (name in TIMED)


@pytest.mark.parametrize("name", sorted(TIMED))
def test_a_window_padded_at_an_episode_start_is_finite_and_holds_still(name):
    """A window at an episode's start repeats its first frame at the same time (gaps of zero):
    outputs and gradients stay finite (LTC's solver divides by the gap), and an ODE cell's last
    output equals that of the window without the repeats (no time passed: nothing happened)."""
    torch.manual_seed(0)
    head = build_head(name, input_dim=10, d_model=16, num_heads=4, causal=True).eval()
    x = torch.randn(2, 3, 10)
    padded = torch.cat([x[:, :1].expand(2, 5, 10), x[:, 1:]], 1)  # the first frame seen 5 times
    ts = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.5, 2.5]])
    ts_padded = torch.cat([ts[:, :1].expand(2, 5), ts[:, 1:]], 1)
    params = [p for p in head.parameters() if p.requires_grad]
    y = head(padded.requires_grad_(), ts_padded)
    grads = torch.autograd.grad(y.square().sum(), params, allow_unused=True)
    assert torch.isfinite(y).all() and all(g is None or torch.isfinite(g).all() for g in grads)
    if name in ("ltc", "ctrnn"):  # ODE cells: a zero gap leaves the state where it was (CfC's closed form does not)
        with torch.no_grad():
            assert torch.allclose(head(padded, ts_padded), head(x, ts), atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_every_head_learns_a_toy_sequence_task(name):
    """Target: the mean of feature 0 over the sequence (needs every step, not just the last)."""
    torch.manual_seed(0)
    head = build_head(name, input_dim=4, output_dim=1, d_model=16, num_heads=4, causal=True)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x_val = torch.randn(64, 5, 4, generator=g)
    y_val = x_val[:, :, 0].mean(1, keepdim=True)

    def val_loss() -> float:
        with torch.no_grad():
            return torch.nn.functional.mse_loss(head(x_val), y_val).item()

    before = val_loss()
    for _ in range(120):
        x = torch.randn(32, 5, 4, generator=g)
        loss = torch.nn.functional.mse_loss(head(x), x[:, :, 0].mean(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = val_loss()
    assert after < 0.6 * before, f"{name}: validation loss {before:.4f} -> {after:.4f}"


def test_nac_variants_are_presets_of_one_layer():
    assert build_head("nac-pw", input_dim=8).nac.config.selection == "pairwise"
    assert build_head("nac-fc", input_dim=8).nac.config.gates == "dense"
    custom = build_head("nac", input_dim=8, nac={"mode": "steady", "topk": 2})
    assert custom.nac.config.mode == "steady" and custom.nac.config.topk == 2


@pytest.mark.parametrize(
    "options, message",
    [
        ({"name": "transformer", "input_dim": 8}, "unknown head 'transformer'; choose one of nac"),
        ({"name": "lstm", "input_dim": 8, "nac": {"topk": 3}}, "nac options given"),
        ({"name": "nac", "input_dim": 8, "nac": {"mode": "rk4"}}, "mode must be one of"),
        ({"name": "mha", "input_dim": 8, "window": 3}, "window needs causal"),
        ({"name": "lstm", "input_dim": 8, "window": 0}, "window must be >= 1"),
    ],
)
def test_bad_head_configs_say_what_is_allowed(options, message):
    with pytest.raises(ConfigError, match=message):
        HeadConfig.from_dict(options)


@pytest.mark.parametrize("name", ALL)
def test_attention_heads_say_where_the_last_step_looks(name):
    head = build_head(name, input_dim=10, d_model=16, num_heads=4, causal=True, window=3).eval()
    x = torch.randn(2, 6, 10)
    ts = torch.cumsum(torch.rand(2, 6) + 0.1, 1)
    with torch.no_grad():
        w = head.last_step_attention(x, ts, effective=False)
        eff = head.last_step_attention(x, ts)
    if not head.is_attention:
        assert w is None and eff is None
        return
    assert w.shape == eff.shape == (2, 6)
    assert torch.allclose(w.sum(-1), torch.ones(2), atol=1e-5)  # the softmax
    assert (w[:, :3] == 0).all() and (w >= 0).all()  # only the last 3 steps are in the window
    if name.startswith("nac"):  # what the output uses: softmax x t_ij, with 0 < t_ij < 1
        assert (eff[:, :3] == 0).all() and (eff <= w + 1e-7).all() and (eff.sum(-1) < 1).all()
    else:
        assert torch.allclose(eff, w)


def test_rotary_attention_sees_order_and_gaps_but_not_absolute_time():
    """mha (torch's, no positions) gives the same last-step output whatever the order of the
    earlier steps; mha-rope does not, and it depends on the gaps between steps, not on when the
    window started."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 10)
    perm = torch.tensor([3, 0, 4, 1, 2, 5])  # the last step stays last
    ts = torch.cumsum(torch.rand(2, 6) + 0.5, 1)
    plain = build_head("mha", input_dim=10, d_model=16, num_heads=4).eval()
    rope = build_head("mha-rope", input_dim=10, d_model=16, num_heads=4).eval()
    with torch.no_grad():
        assert torch.allclose(plain(x), plain(x[:, perm]), atol=1e-5)
        assert not torch.allclose(rope(x, ts), rope(x[:, perm], ts), atol=1e-3)
        assert torch.allclose(rope(x, ts), rope(x, ts + 1234.5), atol=1e-4)
        assert not torch.allclose(rope(x, ts), rope(x, ts * 2), atol=1e-3)
        w = rope.last_step_attention(x, ts)
        pad = torch.zeros(2, 6, dtype=torch.bool)
        pad[:, :2] = True  # padded keys do not count
        y2 = x.clone()
        y2[:, :2] = torch.randn(2, 2, 10)
        assert torch.allclose(rope(x, ts, key_padding_mask=pad), rope(y2, ts, key_padding_mask=pad), atol=1e-5)
    assert w.shape == (2, 6) and torch.allclose(w.sum(-1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize("name", ["cfc", "ltc", "ctrnn"])
def test_timed_heads_in_low_precision_read_gaps_late_in_an_episode_as_early_on(name):
    """Under mixed precision the inputs are bfloat16, whose 8 bits of mantissa cannot tell 300.00 s from 300.02 s:
    the gaps between frames are taken in the timestamps' own precision, then cast, so a window 300 s into an
    episode gives what the same window gives at its start."""
    torch.manual_seed(0)
    head = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4).eval().to(torch.bfloat16)
    x = torch.randn(2, 6, 10).to(torch.bfloat16)
    early = torch.arange(6, dtype=torch.float32).expand(2, 6) * 0.02
    with torch.no_grad():
        a, b = head(x, early), head(x, early + 300.0)
    assert torch.allclose(a.float(), b.float(), atol=0.05), (a - b).abs().max()


@pytest.mark.parametrize("name", ALL)
def test_every_head_trains_under_bfloat16_autocast_with_finite_gradients(name):
    """Mixed precision as `train --precision bf16` runs it on a CPU: the forward under autocast, a float32 loss."""
    torch.manual_seed(0)
    head = build_head(name, input_dim=10, output_dim=5, d_model=16, num_heads=4)
    x, ts = torch.randn(3, 6, 10), torch.cumsum(torch.rand(3, 6) * 0.04 + 0.02, 1) + 100.0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = head(x, ts)
    y.float().pow(2).mean().backward()
    grads = [p.grad for p in head.parameters() if p.requires_grad and p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
