"""nacdrive explain: the figures are written, non-empty, and match the head."""

import json

import torch
from PIL import Image

from agents.figures.explain import ExplainConfig, explain
from nac.driving import DrivingNet, DrivingNetConfig


def _run(tmp_path, head):
    torch.manual_seed(0)
    DrivingNet(DrivingNetConfig(head=head, window=3, num_heads=4)).save(tmp_path / head, "best", {"train": {}})
    return str(tmp_path / head)


def test_nac_policies_get_gate_figures_saliency_and_actions(tmp_path):
    r = explain(ExplainConfig(run=_run(tmp_path, "nac"), out=str(tmp_path / "fig"), seed=5, max_steps=30, saliency_frames=3))
    names = sorted(p.split("/")[-1] for p in r["figures"])
    assert names == ["actions.png", "attention_by_age.png", "logits.png", "omega_tau.png", "omega_tau_by_action.png", "phi.png", "saliency.png"]
    for p in r["figures"]:
        with Image.open(p) as im:
            assert im.size[0] > 200 and im.size[1] > 150
    md = (tmp_path / "fig" / "explain.md").read_text()
    assert "omega_tau" in md and "| action |" in md
    summary = json.loads((tmp_path / "fig" / "explain.json").read_text())
    assert summary["steps"] == 30 and all(len(v) == 4 for v in summary["omega_tau_by_action"].values())
    soft, eff = summary["attention_by_age"]["softmax"], summary["attention_by_age"]["effective"]
    assert len(soft) == len(eff) == 3 and abs(sum(soft) - 1) < 1e-3  # the softmax over the window's 3 frames
    assert all(0 < e < s for e, s in zip(eff, soft))  # softmax x t_ij, 0 < t_ij < 1
    assert "effective weight" in md and summary["softmax_spread_median"] <= 3.0  # bounded logits: at most a factor of e


def test_recurrent_policies_get_no_gate_figures(tmp_path):
    r = explain(ExplainConfig(run=_run(tmp_path, "gru"), out=str(tmp_path / "fig"), seed=5, max_steps=20, saliency_frames=2))
    assert sorted(p.split("/")[-1] for p in r["figures"]) == ["actions.png", "saliency.png"]
    assert "not a NAC head" in (tmp_path / "fig" / "explain.md").read_text()


def test_continuous_policies_get_their_actions_beside_the_experts(tmp_path):
    torch.manual_seed(0)
    DrivingNet(DrivingNetConfig(head="gru", window=3, action_space="continuous")).save(tmp_path / "c", "best", {"train": {}})
    explain(ExplainConfig(run=str(tmp_path / "c"), out=str(tmp_path / "fig"), seed=5, max_steps=25, saliency_frames=1))
    summary = json.loads((tmp_path / "fig" / "explain.json").read_text())
    for who in ("policy", "expert"):
        a = summary["actions"][who]
        assert 0 <= a["gas_mean"] <= 1 and 0 <= a["brake_mean"] <= 1 and 0 <= a["braking_share"] <= 1
    assert summary["actions"]["policy"] != summary["actions"]["expert"]  # an untrained policy does not drive like the expert
    assert "steps braking" in (tmp_path / "fig" / "explain.md").read_text()
