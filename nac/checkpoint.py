"""Files: checkpoints (weights in safetensors, everything else in JSON) and the one JSON writer.

A checkpoint folder holds `config.json` (enough to rebuild the model) and `<name>.safetensors`.
Loading one never executes code from it: no pickles anywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from nac.config import ConfigError

M = TypeVar("M", bound=nn.Module)


def write_json(path: str | Path, data: Any, sort_keys: bool = False) -> None:
    """Write JSON atomically (a temporary file, then rename): readers never see half a file.

    The one way this project writes a JSON file; the parent folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=sort_keys) + "\n")
    os.replace(tmp, path)


REDO = "restore it from a copy, or delete it and run the command that wrote it again"


def read_json(path: str | Path, fix: str = REDO) -> Any:
    """A JSON file's content, or a ConfigError naming the file, what is wrong and `fix` (what to do) when it is cut short
    or is not JSON: a file a user copied half of, or edited by hand. A missing file raises FileNotFoundError.

    The one way this project reads a JSON file it wrote (write_json)."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f", line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"{path} is cut short or is not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc.reason}{where}): {fix}") from None


def read_weights(path: str | Path, device: str = "cpu", fix: str = REDO) -> dict[str, Tensor]:
    """The tensors of a safetensors file, or a ConfigError naming the file and `fix` when it is cut short or is not
    safetensors (safetensors' own error is a traceback). A missing file raises FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    try:
        return load_file(str(path), device=device)
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConfigError(f"{path} is cut short or is not a safetensors file ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): {fix}") from None


def save_checkpoint(directory: str | Path, config: dict[str, Any], state: dict[str, Tensor], name: str = "model") -> None:
    """Write `config.json` and `<name>.safetensors` into directory (created if missing)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {key: value.detach().cpu().contiguous() for key, value in state.items()}
    tmp = d / f".{name}.safetensors.tmp"
    save_file(tensors, str(tmp))
    tmp.replace(d / f"{name}.safetensors")
    write_json(d / "config.json", config, sort_keys=True)


def load_checkpoint(directory: str | Path, map_location: str = "cpu", name: str = "model") -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config, weights) of a checkpoint folder; a missing file or broken JSON is a clear error."""
    d = Path(directory)
    if d.is_file():  # a file among the folders a glob gave (agents/pretrained/* takes its README.md too)
        raise FileNotFoundError(f"{d} is a file, not a checkpoint folder (one holds config.json and {name}.safetensors)")
    cfg_path, w_path = d / "config.json", d / f"{name}.safetensors"
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: a checkpoint folder holds config.json and {name}.safetensors")
    fix = "the checkpoint folder is damaged: copy it again, or train it again"
    config = read_json(cfg_path, fix)
    if not isinstance(config, dict):
        raise ConfigError(f"{cfg_path} holds no checkpoint config (a JSON object): {fix}")
    return config, read_weights(w_path, map_location, fix)


def build_loaded(build: Callable[[], M], state: dict[str, Tensor], source: str | Path) -> M:
    """build() a network and load `state` into it strictly: the network as saved. Its wiring masks
    come from the state, so they are not wired again (nac.wiring.masks_from_weights)."""
    from nac.wiring import masks_from_weights

    with masks_from_weights():
        module = build()
    load_state_strict(module, state, source)
    return module


def load_state_strict(module: nn.Module, state: dict[str, Tensor], source: str | Path) -> None:
    """Load weights, explaining a config / weights mismatch in one sentence."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:3]}")
        if wrong:
            k = wrong[0]
            parts.append(f"{k} has shape {tuple(state[k].shape)}, config needs {tuple(expected[k].shape)}")
        raise ConfigError(f"weights in {source} do not match its config.json: " + "; ".join(parts))
    module.load_state_dict(state)
