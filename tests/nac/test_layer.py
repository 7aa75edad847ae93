"""The NAC layer: gates that depend on the pair, key selection, causality, streaming, I/O."""

import pytest
import torch

from tests.nac.inputs import sequence

from nac import NAC, ConfigError, NACConfig
from nac.selection import KeyRule

MODES = ("exact", "euler", "steady")


def _pair_pass(layer: NAC, x: torch.Tensor):
    """Run the layer's pieces so that q and k are leaves whose gradients we can read."""
    q, k, v, _, _ = layer.project(layer.embed(x))
    q = q.detach().requires_grad_(True)
    k = k.detach().requires_grad_(True)
    uq, uk = layer.pair_halves(q, k)
    t = x.shape[1]
    _, details = layer.attend_selected(q, uq, k, uk, v, None, None, KeyRule(torch.arange(t), torch.arange(t)))
    return q, k, details


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gate", ["phi", "omega_tau"])
def test_phi_and_omega_tau_depend_on_query_and_key(mode, gate):
    layer = NAC(16, 4, input_dim=16, mode=mode, topk=4, return_sequences=True)
    q, k, details = _pair_pass(layer, sequence())
    value = getattr(details, gate)
    assert value.std() > 1e-3  # not a constant (the authors' code gives std 0.0)
    value.sum().backward()
    assert q.grad.abs().sum() > 0 and k.grad.abs().sum() > 0


@pytest.mark.parametrize("mode", MODES)
def test_logits_have_gradient_through_q_and_k_in_every_mode(mode):
    layer = NAC(16, 4, input_dim=16, mode=mode, topk=4, return_sequences=True)
    q, k, details = _pair_pass(layer, sequence())
    details.logits[details.valid].sum().backward()
    assert q.grad.abs().sum() > 0 and k.grad.abs().sum() > 0


def test_exact_logits_lie_within_zero_and_phi_over_omega_tau():
    layer = NAC(16, 4, input_dim=16, mode="exact", return_sequences=True)
    _, details = layer(sequence(), torch.cumsum(torch.rand(2, 12) * 3, 1), return_details=True)
    a, bound = details.logits[details.valid], (details.phi / details.omega_tau)[details.valid]
    assert (a >= 0).all() and (a <= bound).all()


def test_euler_layer_approaches_exact_layer_with_many_steps():
    torch.manual_seed(0)
    exact = NAC(16, 4, input_dim=16, mode="exact", return_sequences=True)
    euler = NAC(16, 4, input_dim=16, mode="euler", euler_steps=3000, return_sequences=True)
    coarse = NAC(16, 4, input_dim=16, mode="euler", euler_steps=2, return_sequences=True)
    euler.load_state_dict(exact.state_dict())
    coarse.load_state_dict(exact.state_dict())
    x = sequence()
    with torch.no_grad():
        ref = exact(x)
        assert (euler(x) - ref).abs().max() < 1e-4
        assert (coarse(x) - ref).abs().max() > 1e-4


@pytest.mark.parametrize("selection", ["topk", "pairwise", "sqrt"])
def test_causal_outputs_do_not_depend_on_later_inputs(selection):
    layer = NAC(16, 4, input_dim=16, selection=selection, topk=3, causal=True, return_sequences=True).eval()
    x = sequence(t=16)
    y = x.clone()
    y[:, 10:] = torch.randn_like(y[:, 10:]) * 5
    with torch.no_grad():
        a, b = layer(x), layer(y)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)
    assert not torch.allclose(a[:, 10:], b[:, 10:], atol=1e-3)


@pytest.mark.parametrize("selection", ["topk", "pairwise"])
@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("timed", [False, True])
def test_streaming_equals_the_windowed_forward(selection, window, timed):
    layer = NAC(16, 4, input_dim=16, selection=selection, topk=3, causal=True, window=window, return_sequences=True).eval()
    x = sequence(t=11)
    ts = torch.cumsum(torch.rand(2, 11) + 0.1, 1) if timed else None
    with torch.no_grad():
        full = layer(x, ts)
        state, outs = layer.init_state(2), []
        for i in range(11):
            y, state = layer.step(x[:, i], state, None if ts is None else ts[:, i])
            outs.append(y)
    assert torch.allclose(torch.stack(outs, 1), full, atol=1e-5)
    if window is not None:
        assert state["k"].shape[2] == window  # the cache is bounded


def test_timestamps_change_the_output_and_a_clock_shift_does_not():
    layer = NAC(16, 4, input_dim=16, causal=True, return_sequences=True).eval()
    x = sequence()
    ts = torch.cumsum(torch.rand(2, 12) + 0.2, 1)
    with torch.no_grad():
        base = layer(x, ts)
        assert torch.allclose(layer(x, ts + 100.0), base, atol=1e-5)
        assert not torch.allclose(layer(x, ts * 3), base, atol=1e-3)


def test_padded_keys_get_no_weight_and_do_not_change_the_output():
    layer = NAC(16, 4, input_dim=16, selection="pairwise", return_sequences=True, return_attention=True).eval()
    x = sequence()
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[:, 5] = True
    y = x.clone()
    y[:, 5] = 100.0
    with torch.no_grad():
        out_x, attn = layer(x, key_padding_mask=pad)
        out_y, _ = layer(y, key_padding_mask=pad)
    assert torch.allclose(out_x[:, [0, 1, 2, 3, 4, 6]], out_y[:, [0, 1, 2, 3, 4, 6]], atol=1e-5)
    assert attn[..., 5].abs().max() == 0
    assert torch.allclose(attn.sum(-1), torch.ones(()), atol=1e-5)


def test_last_step_output_equals_last_row_of_sequence_output():
    seq = NAC(16, 4, input_dim=16, return_sequences=True).eval()
    last = NAC(16, 4, input_dim=16, return_sequences=False).eval()
    last.load_state_dict(seq.state_dict())
    x = sequence()
    with torch.no_grad():
        assert torch.allclose(last(x), seq(x)[:, -1], atol=1e-6)


def test_sensory_gates_are_sparse_ncp_projections_and_fc_ablation_is_dense():
    sparse = NAC(64, 4, input_dim=30, sparsity=0.5)
    dense = NAC(64, 4, input_dim=30, gates="dense")
    assert 0.3 < sparse.q_proj.mask.mean() < 0.7
    assert not torch.equal(sparse.q_proj.mask, sparse.k_proj.mask)  # one seed per projection
    assert sparse.inter_command.mask.mean() < 1.0
    assert dense.q_proj.mask.mean() == 1.0 and dense.inter_command.mask.mean() == 1.0


def test_save_and_load_round_trip(tmp_path):
    layer = NAC(32, 4, input_dim=10, mode="euler", topk=3, causal=True).eval()
    layer.save(tmp_path / "nac")
    loaded = NAC.load(tmp_path / "nac").eval()
    assert loaded.config == layer.config
    x = sequence(d=10)
    with torch.no_grad():
        assert torch.equal(loaded(x), layer(x))
    assert not list(tmp_path.glob("**/*.pt")) and not list(tmp_path.glob("**/*.pkl"))


def test_loading_weights_that_do_not_match_the_config_says_so(tmp_path):
    NAC(32, 4, input_dim=10).save(tmp_path / "a")
    cfg = (tmp_path / "a" / "config.json").read_text().replace('"d_model": 32', '"d_model": 64')
    (tmp_path / "a" / "config.json").write_text(cfg)
    with pytest.raises(ConfigError, match="do not match"):
        NAC.load(tmp_path / "a")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"mode": "rk4"}, "mode must be one of exact, euler, steady"),
        ({"selection": "random"}, "selection must be one of"),
        ({"d_model": 30, "num_heads": 4}, "divisible"),
        ({"sparsity": 0.95}, "sparsity must be between 0.1 and 0.9"),
        ({"window": 4}, "window needs causal"),
        ({"colour": "red"}, "unknown NAC options"),
    ],
)
def test_bad_config_values_say_what_is_allowed(bad, message):
    with pytest.raises(ConfigError, match=message):
        NACConfig.from_dict(bad)


def test_inference_reuses_the_masked_weight_until_the_weight_changes():
    layer = NAC(d_model=16, num_heads=4, input_dim=12).eval()
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        before = layer(x)
        assert torch.equal(layer(x), before)
        layer.q_proj.weight.mul_(2.0)  # an in-place change, as an optimizer step or load makes
        after = layer(x)
    assert not torch.allclose(after, before)
    assert torch.allclose(after, layer(x))  # with autograd: the product is made afresh


def test_validation_after_a_fused_adam_step_sees_the_new_weights():
    """torch's fused Adam updates a weight in place without bumping its version counter: the
    cached product must not outlive the switch back to training mode (a stale one made every
    validation after the first run on the first validation's sensory weights)."""
    torch.manual_seed(0)
    layer = NAC(d_model=16, num_heads=4, input_dim=12)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    x = torch.randn(2, 5, 12)
    for _ in range(2):  # as the training loop: a step in train mode, then a validation in eval mode
        layer.train()
        opt.zero_grad()
        layer(x).pow(2).sum().backward()
        version = layer.q_proj.weight._version
        opt.step()
        assert layer.q_proj.weight._version == version  # why the version alone cannot tell
        layer.eval()
        with torch.no_grad():
            cached = layer(x)
        assert torch.allclose(cached, layer(x))  # autograd on: made afresh from today's weights


# ---------------------------------------------------------------------- the paper's properties, pinned
def _trained_like(layer: NAC, seed: int = 1) -> NAC:
    """Spread the gate heads' weights so that phi and omega_tau vary as in a trained layer."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return layer.eval()


@pytest.mark.parametrize("selection", ["topk", "pairwise"])
def test_the_output_is_the_papers_sum_written_out(selection):
    """y_i = out_proj(concat_h sum_j softmax_j(a_ij) t_ij v_j), from the details alone."""
    layer = _trained_like(NAC(16, 4, input_dim=16, topk=5, selection=selection, return_sequences=True))
    x, ts = sequence(), torch.cumsum(torch.rand(2, 12) + 0.1, 1)
    with torch.no_grad():
        y, d = layer(x, ts, return_details=True)
        _, _, v, _, _ = layer.project(layer.embed(x))  # (B, H, T, hd)
        b, h, tq, k = d.weights.shape
        v_sel = torch.gather(v.unsqueeze(2).expand(b, h, tq, -1, v.shape[-1]), 3, d.indices.unsqueeze(-1).expand(-1, -1, -1, -1, v.shape[-1]))
        heads = (torch.softmax(d.logits, -1).nan_to_num(0) * d.t).unsqueeze(-1).mul(v_sel).sum(3)  # (B, H, T, hd)
        by_hand = layer.out_proj(heads.transpose(1, 2).reshape(b, tq, -1))
    assert torch.allclose(y, by_hand, atol=1e-5)
    assert torch.allclose(d.effective, d.weights * d.t, atol=1e-7)
    assert (d.effective.sum(-1) < 1).all()  # the quadrature weights t_ij < 1 shrink the sum below one


def test_quadrature_dt_multiplies_by_the_constant_and_time_uses_t_ij():
    base = _trained_like(NAC(16, 4, input_dim=16, quadrature="dt", dt=1.0))
    double = NAC(16, 4, input_dim=16, quadrature="dt", dt=2.0).eval()
    timed = NAC(16, 4, input_dim=16, quadrature="time").eval()
    for other in (double, timed):
        other.load_state_dict(base.state_dict())
    x, bias = sequence(), base.out_proj.bias
    with torch.no_grad():
        y1, y2, yt = base(x), double(x), timed(x)
        _, d1 = base(x, return_details=True)
    assert torch.allclose(y2 - bias, 2 * (y1 - bias), atol=1e-5)  # the output is linear in dt
    assert torch.allclose(d1.effective, d1.weights, atol=1e-7)  # dt = 1: the softmax itself
    assert not torch.allclose(yt, y1, atol=1e-3)


def test_tau_epsilon_shifts_omega_tau_and_moves_the_logits():
    a = _trained_like(NAC(16, 4, input_dim=16, tau_epsilon=1e-5, return_sequences=True))
    b = NAC(16, 4, input_dim=16, tau_epsilon=0.5, return_sequences=True).eval()
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        _, da = a(sequence(), return_details=True)
        _, db = b(sequence(), return_details=True)
    assert torch.allclose(db.omega_tau - da.omega_tau, torch.full_like(da.omega_tau, 0.5 - 1e-5), atol=1e-6)
    assert torch.allclose(db.phi, da.phi) and (db.logits[db.valid] < da.logits[da.valid]).all()  # a larger rate, a smaller state


def test_gate_masks_are_autoncps_sensory_to_inter_synapses_for_the_recorded_seed():
    from ncps.wirings import AutoNCP

    layer = NAC(64, 4, input_dim=30, sparsity=0.5, seed=7)
    for offset, proj in enumerate((layer.q_proj, layer.k_proj, layer.v_proj)):
        units = 64 + 3
        while len(list(AutoNCP(units, 1, sparsity_level=0.5, seed=7 + offset).get_neurons_of_layer(0))) < 64:
            units += 1
        w = AutoNCP(units, 1, sparsity_level=0.5, seed=7 + offset)
        w.build(30)
        inter = list(w.get_neurons_of_layer(0))
        expected = torch.from_numpy((w.sensory_adjacency_matrix[:, inter] != 0).astype("float32"))
        assert torch.equal(proj.mask.t(), expected)


def test_masked_out_weights_have_no_effect_on_the_output():
    layer = _trained_like(NAC(16, 4, input_dim=16, sparsity=0.5))
    x = sequence()
    with torch.no_grad():
        ref = layer(x)
        for m in (layer.q_proj, layer.inter_command):
            off = m.mask == 0
            assert off.any()
            m.weight[off.expand_as(m.weight)] += 100.0
        assert torch.allclose(layer(x), ref, atol=1e-6)
        on = layer.q_proj.mask == 1
        layer.q_proj.weight[on] += 1.0
        assert not torch.allclose(layer(x), ref, atol=1e-3)


def test_phi_and_omega_tau_vary_across_the_keys_of_one_query_in_every_head():
    layer = _trained_like(NAC(16, 4, input_dim=16, selection="pairwise", return_sequences=True))
    with torch.no_grad():
        _, d = layer(sequence(), return_details=True)
    for gate in (d.phi, d.omega_tau):
        per_query = gate.std(dim=-1)  # (B, H, Tq): spread over the keys of one query, head by head
        assert (per_query > 1e-4).all()


def test_euler_logits_stay_within_zero_and_phi_t_at_the_layer_level():
    layer = _trained_like(NAC(16, 4, input_dim=16, mode="euler", return_sequences=True))
    with torch.no_grad():
        layer.gate_heads.bias[:, 1] += 15.0  # omega_tau about 15: the default step t/6 would overshoot
        _, d = layer(sequence(), torch.cumsum(torch.rand(2, 12) * 3, 1), return_details=True)
    ok = d.valid
    assert (d.omega_tau[ok] * d.t[ok] / 6 > 1).any()  # the case the bound is about does occur
    assert (d.logits[ok] >= 0).all() and (d.logits[ok] <= d.phi[ok] * d.t[ok] * (1 + 1e-6)).all()


def test_the_papers_ablations_are_configurations_of_the_one_layer():
    from nac.heads import build_head

    def nac_of(name):
        return build_head(name, input_dim=16, d_model=16, num_heads=4).nac

    for name, sparsity in (("nac-09sfc", 0.9), ("nac-05sfc", 0.5), ("nac-02sfc", 0.2)):
        layer = nac_of(name)
        assert layer.config.gates == "sparse"
        density = torch.cat([layer.q_proj.mask.flatten(), layer.k_proj.mask.flatten(), layer.v_proj.mask.flatten()]).mean()
        assert abs(density - (1 - sparsity)) < 0.1
    assert nac_of("nac-fc").q_proj.mask.mean() == 1.0
    x = sequence()
    for name, act in (("nac-phi-none", "none"), ("nac-phi-tanh", "tanh")):
        layer = _trained_like(nac_of(name))
        assert layer.config.phi_activation == act
        with torch.no_grad():
            _, d = layer(x, return_details=True)
        assert (d.phi < 0).any()  # negative logits are possible, unlike sigmoid's phi
    const = _trained_like(nac_of("nac-const"))
    with torch.no_grad():
        _, d = const(x, return_details=True)
    w = d.weights[d.valid].view(-1, d.valid.sum(-1).max())
    assert torch.allclose(w, w[:, :1].expand_as(w))  # uniform over the selected keys
    assert nac_of("nac-2k").config.topk == 2 and nac_of("nac-euler").config.mode == "euler"


def test_with_one_key_every_mode_and_selection_is_the_same_function():
    """A query that sees one key puts all its weight on it, whatever the logit: at window 1 (the
    paper's CarRacing setting, one frame per sample) NAC's modes and key selections compute the
    same output from the same weights, and their trainings from one seed are identical (the paper
    table's study: docs/results.md). With two keys they differ."""
    torch.manual_seed(0)
    ref = NAC(16, 4, input_dim=16, mode="exact", return_sequences=True)

    def outputs(t: int) -> list[torch.Tensor]:
        x, ts = sequence(t=t), torch.cumsum(torch.rand(2, t, generator=torch.Generator().manual_seed(1)), 1)
        outs = []
        with torch.no_grad():
            for mode, selection in (("exact", "topk"), ("euler", "topk"), ("steady", "topk"), ("exact", "pairwise")):
                other = NAC(16, 4, input_dim=16, mode=mode, selection=selection, return_sequences=True)
                other.load_state_dict(ref.state_dict())
                outs.append(other(x, ts))
        return outs

    one = outputs(1)
    assert all(torch.equal(o, one[0]) for o in one[1:])
    two = outputs(2)
    assert not torch.allclose(two[1], two[0], atol=1e-4) and not torch.allclose(two[2], two[0], atol=1e-4)  # the modes differ
