"""Files as a user gets them, cut short by a copy, a full disk or a kill, or written by an older version: every
command that reads one ends in one line naming the file and what to do, never a traceback, and computes nothing
from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scripts.cli import main

PRETRAINED = Path(__file__).resolve().parents[2] / "agents" / "pretrained" / "nac"


def _one_line(argv, capsys, *expected: str) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def _cut(path: Path, share: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * share)])


@pytest.fixture
def run_copy(tmp_path) -> Path:
    run = tmp_path / "nac"
    shutil.copytree(PRETRAINED, run)
    return run


EVALUATE = ["evaluate", "--episodes", "1", "--max-steps", "5", "--workers", "1"]


@pytest.mark.parametrize("share", [0.5, 0.0001])
def test_weights_cut_short_are_named(run_copy, capsys, share):
    _cut(run_copy / "best.safetensors", share)
    _one_line([*EVALUATE, run_copy], capsys, str(run_copy / "best.safetensors"), "cut short", "copy it again, or train it again")
    _one_line(["record", run_copy, "--out", run_copy.parent / "v.mp4", "--max-steps", "5"], capsys, str(run_copy / "best.safetensors"))
    assert not (run_copy.parent / "v.mp4").exists()


def test_a_config_cut_short_is_named(run_copy, capsys):
    _cut(run_copy / "config.json")
    _one_line([*EVALUATE, run_copy], capsys, str(run_copy / "config.json"), "cut short or is not JSON", "line ")
    _one_line(["explain", run_copy, "--out", run_copy.parent / "fig", "--max-steps", "5"], capsys, str(run_copy / "config.json"))


def test_a_config_from_another_version_is_named(run_copy, capsys):
    config = json.loads((run_copy / "config.json").read_text())
    config["net"]["frame_history"] = 4  # a network option this version does not know
    (run_copy / "config.json").write_text(json.dumps(config))
    _one_line([*EVALUATE, run_copy], capsys, str(run_copy / "config.json"), "frame_history", "another version of nac-drive")


def test_a_demonstration_file_cut_short_is_named_and_recorded_again(tiny_demos_continuous, tmp_path, capsys):
    demos = tmp_path / "demos"
    shutil.copytree(tiny_demos_continuous, demos)
    manifest = json.loads((demos / "manifest.json").read_text())
    victim = demos / manifest["episodes"][1]["file"]
    whole = victim.read_bytes()
    _cut(victim)
    run = tmp_path / "run"
    _one_line(["train", "--data", demos, "--out", run, "--epochs", "1", "--batch-size", "4"], capsys, str(victim), "cut short or damaged",
              "collect --resume")
    assert not (run / "best.safetensors").exists()  # nothing trained from it
    assert main(["data", "check", str(demos)]) == 1
    assert victim.name in capsys.readouterr().out
    # the same collect command, resumed, sets the damaged file aside and records that episode again
    assert main(["collect", "--expert", "track", "--episodes", "4", "--max-steps", "48", "--workers", "1", "--out", str(demos), "--resume"]) == 0
    assert victim.read_bytes() == whole  # the expert and the track are deterministic: the same episode
    assert (demos / f"{victim.name}.damaged").is_file()
    capsys.readouterr()
    assert main(["data", "check", str(demos)]) == 0


def test_a_manifest_cut_short_is_named(tiny_demos_continuous, tmp_path, capsys):
    demos = tmp_path / "demos"
    shutil.copytree(tiny_demos_continuous, demos)
    _cut(demos / "manifest.json")
    _one_line(["data", "info", demos], capsys, str(demos / "manifest.json"), "cut short or is not JSON")
    _one_line(["train", "--data", demos, "--out", tmp_path / "run", "--epochs", "1"], capsys, str(demos / "manifest.json"))


def test_a_study_file_with_half_a_line_is_named(tmp_path, capsys):
    study = tmp_path / "study"
    study.mkdir()
    (study / "study.json").write_text('{"format": "nacdrive-study/1", "config": {"heads": ["nac"], "runs": {"base/nac/seed0": {"do')
    _one_line(["study", "--report", study], capsys, str(study / "study.json"), "cut short", "restore it from a copy")
    _one_line(["study", "--heads", "nac", "--seeds", "1", "--demos", "3", "--episodes", "1", "--out", study], capsys, str(study / "study.json"))
