"""Checkpoints: weights in safetensors and the config in JSON, written atomically, read back exactly;
a mismatch between the two, a missing file or broken JSON is a one-sentence error."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from nac.checkpoint import build_loaded, load_checkpoint, load_state_strict, save_checkpoint, write_json
from nac.config import ConfigError


def test_a_checkpoint_is_read_back_exactly(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    save_checkpoint(tmp_path / "run", {"hidden": 4, "b": [1, 2]}, net.state_dict(), name="best")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["best.safetensors", "config.json"]  # no temporary left
    config, state = load_checkpoint(tmp_path / "run", name="best")
    assert config == {"b": [1, 2], "hidden": 4}
    again = build_loaded(lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), state, tmp_path / "run")
    x = torch.randn(5, 3)
    assert torch.equal(again(x), net(x))


def test_write_json_replaces_atomically_and_creates_the_folder(tmp_path):
    path = tmp_path / "a" / "b.json"
    write_json(path, {"z": 1, "a": 2}, sort_keys=True)
    write_json(path, {"z": 3})
    assert json.loads(path.read_text()) == {"z": 3} and list(path.parent.iterdir()) == [path]


def test_mismatches_and_missing_files_are_one_sentence(tmp_path):
    net = nn.Linear(3, 4)
    with pytest.raises(ConfigError, match=r"weights in RUN do not match its config.json: bias has shape \(4,\), config needs \(5,\)"):
        load_state_strict(nn.Linear(3, 5), net.state_dict(), "RUN")
    with pytest.raises(ConfigError, match=r"missing \['bias'\]"):
        load_state_strict(nn.Linear(3, 4), {"weight": net.weight.detach()}, "RUN")
    with pytest.raises(FileNotFoundError, match="a checkpoint folder holds config.json and model.safetensors"):
        load_checkpoint(tmp_path)
    (tmp_path / "README.md").write_text("a file")
    with pytest.raises(FileNotFoundError, match=r"README.md is a file, not a checkpoint folder \(one holds config.json and model.safetensors\)"):
        load_checkpoint(tmp_path / "README.md")
    save_checkpoint(tmp_path / "r", {}, net.state_dict())
    (tmp_path / "r" / "config.json").write_text("{broken")
    with pytest.raises(ConfigError, match="is cut short or is not JSON"):
        load_checkpoint(tmp_path / "r")
