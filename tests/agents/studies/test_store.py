"""study.json: every recipe stored whole, nothing counted twice, older files read as they were trained, a grid that
grows but does not change what its finished runs were trained with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.studies.grid import StudyConfig
from agents.studies.store import FORMAT, StudyFile
from agents.training.dagger_config import DaggerConfig
from agents.training.recipe import Recipe
from nac.config import ConfigError


def config(out: Path, **kw) -> StudyConfig:
    return StudyConfig(**{"out": str(out), "heads": ["nac"], "seeds": 1, "demos": 3, "episodes": 2, "seed_start": 100, **kw})


def episode(run: str, seed: int, ret: float = 900.0) -> dict:
    return {"run": run, "level": "none", "episode_seed": seed, "return": ret}


def test_a_new_study_stores_each_recipe_whole_and_counts_an_episode_once(tmp_path):
    s = StudyFile(config(tmp_path, variants={"base": {}, "fast": {"lr": 3e-4}}))
    assert s.data["recipes"]["base"] == Recipe().to_dict() and s.recipe("fast").bc.lr == 3e-4
    assert s.add_episode(episode("base/nac/seed0", 100)) and not s.add_episode(episode("base/nac/seed0", 100, 1.0))
    s.save()
    again = StudyFile(config(tmp_path, variants={"base": {}, "fast": {"lr": 3e-4}}))
    assert again.data["episodes"] == [episode("base/nac/seed0", 100)] and not again.add_episode(episode("base/nac/seed0", 100))
    again.forget("base/nac/seed0")
    assert again.add_episode(episode("base/nac/seed0", 100))  # a forgotten run is driven again


def test_older_files_are_read_as_they_were_trained(tmp_path):
    # a study from before recipes were stored: its overrides on the defaults of that time (LEGACY_RECIPE)
    cfg = config(tmp_path)
    old = {"format": FORMAT, "config": {**json.loads(json.dumps(cfg.__dict__)), "variants": {"base": {}}}, "runs": {}, "episodes": []}
    (tmp_path / "study.json").write_text(json.dumps(old))
    other = {"variants": {"other": {}}}  # a variant asked now is compared with the stored one; this reads "base" as stored
    r = StudyFile(config(tmp_path, **other)).recipe("base")
    assert (r.dagger.beta, r.dagger.perturb, r.bc.stride_jitter, r.bc.regular_share, r.bc.augment) == (0.5, "none", 1, 0.0, "none")
    # a stored recipe (flat names, as before the recipe held its parts) without the fields added since: the value that
    # means what it was trained by
    stored = Recipe().flat()
    stored["dagger_off_road"] = stored.pop("dagger_off_road_steps")  # its older name
    for name in ("dagger_perturb", "arrival_windows", "augment", "dagger_check", "minutes", "dagger_minutes"):
        stored.pop(name)
    (tmp_path / "study.json").write_text(json.dumps({**old, "recipes": {"base": stored}}))
    r = StudyFile(config(tmp_path, **other)).recipe("base")
    assert (r.dagger.perturb, r.bc.arrival_windows, r.bc.augment, r.dagger.check, r.bc.minutes) == ("none", False, "none", DaggerConfig.check, None)
    with_until = {**stored, "dagger_until": 880.0, "dagger_max_rounds": 4}
    (tmp_path / "study.json").write_text(json.dumps({**old, "recipes": {"base": with_until}}))
    assert StudyFile(config(tmp_path, **other)).recipe("base").dagger.check == 0  # an old until judged by its rollouts


def test_a_study_grows_but_keeps_what_its_runs_were_trained_with(tmp_path):
    StudyFile(config(tmp_path)).save()
    grown = StudyFile(config(tmp_path, heads=["lstm"], seeds=2, levels=["none", "color"]))
    assert grown.data["config"]["heads"] == ["nac", "lstm"] and grown.data["config"]["seeds"] == 2
    assert grown.data["config"]["levels"] == ["none", "color"]
    with pytest.raises(ConfigError, match="was made with demos=3, not 5; use another --out"):
        StudyFile(config(tmp_path, demos=5))
    with pytest.raises(ConfigError, match="variant 'base' in .* was trained with lr=0.0001 \\(asked: 0.0003\\)"):
        StudyFile(config(tmp_path, variants={"base": {"lr": 3e-4}}))
