"""study.json: a study's config, each variant's recipe as trained, each run's figures and every
episode, keyed so that none is counted twice; read from older versions' files too."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents.studies.grid import StudyConfig
from agents.studies.recipe import LEGACY_RECIPE, stored_recipe
from agents.training.recipe import Recipe
from nac.checkpoint import read_json, write_json
from nac.config import need

FORMAT = "nacdrive-study/1"
STUDY_FILE = "study.json"
STUDY_FIX = ("it holds the study's figures and episodes: restore it from a copy, or start the study again in another --out "
             "(finished run folders are not read from it)")
EXPERT = "expert"  # the run key and head of the expert's reference episodes, and their group in a report


class StudyFile:
    """study.json: the config, each run's figures, every episode; written atomically on each change."""

    def __init__(self, cfg: StudyConfig) -> None:
        self.path = Path(cfg.out) / STUDY_FILE
        if self.path.is_file():
            self.data = read_json(self.path, STUDY_FIX)
            need(self.data.get("format") == FORMAT, f"{self.path} is not a study file ({FORMAT})")
            # a study from before "recipes" was stored: its variants' overrides on the defaults of that time
            self.data.setdefault("recipes", {v: {**LEGACY_RECIPE, **o} for v, o in self.data["config"]["variants"].items()})
            self.data["recipes"] = {v: stored_recipe(r).to_dict() for v, r in self.data["recipes"].items()}
            self._check_compatible(cfg)
            self.data["config"] = _merged_config(self.data["config"], asdict(cfg))
        else:
            self.data = {"format": FORMAT, "config": asdict(cfg), "recipes": {}, "runs": {}, "episodes": []}
        for v, overrides in cfg.variants.items():  # every field of every variant's recipe, so that a later change of a default cannot reach its runs
            self.data["recipes"].setdefault(v, Recipe.from_dict(overrides).to_dict())
        # the runs asked for by every command that grew the study (not always every head x variant x seed of the merged config)
        self.data["asked"] = list(dict.fromkeys([*self.data.get("asked", list(self.data["runs"])), *(r["key"] for r in cfg.runs())]))
        self.keys = {self.episode_key(e) for e in self.data["episodes"]}

    def recipe(self, variant: str) -> Recipe:
        """The recipe a variant's runs are trained by: as stored when the variant entered the study."""
        return stored_recipe(self.data["recipes"][variant])

    def _check_compatible(self, cfg: StudyConfig) -> None:
        """A study may grow (heads, seeds, episodes, levels, variants) but not change what its
        finished runs were trained and evaluated with."""
        old = self.data["config"]
        for name in ("task", "demos", "continuous", "expert", "seed_start", "max_steps", *(("speed", "turn_slowdown") if cfg.task == "udacity" else ())):
            was = old.get(name, StudyConfig.__dataclass_fields__[name].default)  # fields added later: their default
            need(was == getattr(cfg, name), f"{self.path} was made with {name}={was!r}, not {getattr(cfg, name)!r}; use another --out")
        for v, overrides in cfg.variants.items():
            if v in self.data["recipes"]:
                was, now = self.recipe(v).flat(), Recipe.from_dict(overrides).flat()
                differ = [f"{k}={was[k]!r} (asked: {now[k]!r})" for k in was if was[k] != now[k]]
                need(not differ, f"variant {v!r} in {self.path} was trained with {', '.join(differ)}: pass those values in --variant "
                                 f"to continue it, or give the new recipe another name")

    @staticmethod
    def episode_key(e: dict[str, Any]) -> tuple[str, str, int]:
        return e["run"], e["level"], e["episode_seed"]

    def forget(self, key: str) -> None:
        """Drop a run and its episodes (it will be trained and driven again)."""
        self.data["runs"].pop(key, None)
        self.data["episodes"] = [e for e in self.data["episodes"] if e["run"] != key]
        self.keys = {self.episode_key(e) for e in self.data["episodes"]}

    def add_episode(self, e: dict[str, Any]) -> bool:
        key = self.episode_key(e)
        if key in self.keys:
            return False  # a retried task's second answer: never counted twice
        self.keys.add(key)
        self.data["episodes"].append(e)
        return True

    def save(self) -> None:
        write_json(self.path, self.data)


def _merged_config(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The grid as it now stands: the union of what was asked in every invocation."""
    merged = dict(new)
    merged["heads"] = list(dict.fromkeys(old["heads"] + new["heads"]))
    merged["variants"] = {**old["variants"], **new["variants"]}
    merged["levels"] = list(dict.fromkeys(old["levels"] + new["levels"]))
    merged["seeds"] = max(old["first_seed"] + old["seeds"], new["first_seed"] + new["seeds"]) - min(old["first_seed"], new["first_seed"])
    merged["first_seed"] = min(old["first_seed"], new["first_seed"])
    merged["episodes"] = max(old["episodes"], new["episodes"])
    merged["perturb_episodes"] = max(old.get("perturb_episodes") or old["episodes"], new["perturb_episodes"] or new["episodes"])
    return merged
