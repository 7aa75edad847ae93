"""Files: checkpoints (weights in safetensors, everything else in JSON) and the one JSON writer.

A checkpoint folder holds `config.json` (enough to rebuild the model) and `<name>.safetensors`.
Loading one never executes code from it: no pickles anywhere.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from nac.config import ConfigError

M = TypeVar("M", bound=nn.Module)


CRASH_AT = "NACDRIVE_CRASH_AT"  # environment: the process kills itself at its N-th crash point (the fault harness)
CRASH_LOG = "NACDRIVE_CRASH_LOG"  # environment: a file each crash point appends its name to (the harness counts them)
_crash_points = 0


def crash_point(name: str) -> None:
    """A place where the process may die and every file must still be whole or unread: between a temporary file and
    its rename, between weights and the JSON beside them, between a recorded frame and its row. Nothing happens
    unless the fault harness (tests/test_faults.py) set CRASH_AT or CRASH_LOG; with CRASH_AT=N the N-th point this
    process reaches kills it with SIGKILL, as a power cut or the kernel's OOM killer would: no handler runs."""
    global _crash_points
    at, log = os.environ.get(CRASH_AT), os.environ.get(CRASH_LOG)
    if at is None and log is None:
        return
    _crash_points += 1
    if log:
        with open(log, "a") as f:
            f.write(f"{name}\n")
    if at is not None and _crash_points == int(at):
        os.kill(os.getpid(), signal.SIGKILL)


def replace_file(tmp: Path, path: Path, what: str) -> None:
    """Rename a whole temporary file onto its final name, atomically (os.replace), with crash points on either side."""
    crash_point(f"{what} written")
    os.replace(tmp, path)
    crash_point(f"{what} in place")


def write_bytes(path: str | Path, data: bytes, what: str = "file") -> None:
    """Write a file atomically (a temporary file beside it, then rename): a reader finds it whole or not at all."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    replace_file(tmp, path, what)


def holds_anything(folder: str | Path) -> bool:
    """Whether a folder exists and holds something besides the temporary files of writes a kill cut short (".NAME.tmp",
    never read, see write_bytes): a folder a job was killed in before its first file was whole is an empty one."""
    folder = Path(folder)
    return folder.is_dir() and any(not (p.name.startswith(".") and p.name.endswith(".tmp")) for p in folder.iterdir())


def write_json(path: str | Path, data: Any, sort_keys: bool = False) -> None:
    """Write JSON atomically (a temporary file, then rename): readers never see half a file.

    The one way this project writes a JSON file; the parent folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, (json.dumps(data, indent=2, sort_keys=sort_keys) + "\n").encode(), path.name)


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
    """Write `config.json` and `<name>.safetensors` into directory (created if missing), each atomically."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {key: value.detach().cpu().contiguous() for key, value in state.items()}
    # the config first: it does not change over a run's saves, so a kill between the two leaves the weights before with
    # it, or (at the first save) a config without weights, which a loader refuses by name and --resume recognises
    write_json(d / "config.json", config, sort_keys=True)
    tmp = d / f".{name}.safetensors.tmp"
    save_file(tensors, str(tmp))
    replace_file(tmp, d / f"{name}.safetensors", f"{name}.safetensors")


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
