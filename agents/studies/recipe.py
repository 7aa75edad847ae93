"""A study's variants: overrides of a recipe preset (agents.training.recipe) parsed from `NAME:KEY=VALUE,...`,
and what recipes stored by older versions were trained by."""

from __future__ import annotations

import json
from typing import Any

from agents.training.dagger_config import DaggerConfig
from agents.training.recipe import PRESETS, RENAMED, Recipe, preset_recipe
from nac.config import need



# Recipe's defaults until study.json stored each variant's whole recipe: what the runs of a study
# written before then were trained by, whatever the defaults are now
LEGACY_RECIPE: dict[str, Any] = {
    "epochs": 4, "dagger_rounds": 2, "dagger_episodes": 10, "dagger_epochs": 2, "dagger_beta": 0.5, "dagger_off_road": 0, "dagger_perturb": "none", "arrival_windows": False, "window": 8,
    "stride_jitter": 1, "regular_share": 0.0, "shift": 0, "select_episodes": 0, "lr": 1e-4, "ema": 0.0, "batch_size": 32, "loss": "mse",
    "balance": "auto", "val_fraction": 0.2, "noise": 0.0, "net": {},
}


# Recipe fields added after studies began storing whole recipes, with the value that means what a stored recipe
# without them was trained by (a field whose default is not the old behaviour must be named here), or a function of the
# stored recipe giving it: DAgger's check changed what dagger_until judges, and means nothing without it, so a study that
# never used until continues under today's default
ADDED_FIELDS: dict[str, Any] = {"dagger_perturb": "none", "arrival_windows": False, "augment": "none", "dagger_select": "last",
                                "dagger_check": lambda recipe: 0 if recipe.get("dagger_until") else DaggerConfig.check}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """'bc:dagger_rounds=0' -> ("bc", {"dagger_rounds": 0}); 'euler:net.nac.mode=euler' sets a nested network option;
    'qs:preset=quickstart,lr=1e-4' starts from a preset (agents.training.recipe.PRESETS) instead of the full recipe.
    Values are JSON where they parse ('true', '3'), text otherwise. Returns the variant's overrides of the full recipe."""
    name, _, spec = text.partition(":")
    need(bool(name) and name.replace("-", "").replace("_", "").isalnum(), f"a variant is NAME[:KEY=VALUE,...] with a plain name (got {text!r})")
    overrides: dict[str, Any] = {}
    preset = "full"
    for item in filter(None, spec.split(",")):
        key, sep, raw = item.partition("=")
        need(bool(sep and key), f"variant {name!r}: expected KEY=VALUE, got {item!r}")
        if key == "preset":
            need(raw in PRESETS, f"variant {name!r}: unknown recipe preset {raw!r}; choose from {', '.join(PRESETS)}")
            preset = raw
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *path, last = key.split(".")
        allowed = list(Recipe.names())
        need(key not in RENAMED, f"variant {name!r}: {key} is {RENAMED.get(key)} now")
        need(path[:1] == ["net"] or (not path and key in allowed),
             f"variant {name!r}: unknown recipe field {key!r}; allowed: {allowed} (net.* for network options, preset=NAME)")
        node = overrides
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    recipe = preset_recipe(preset, overrides).flat()  # checks the values now, with the recipe's own messages
    full = Recipe().flat()
    return name, overrides if preset == "full" else {k: v for k, v in recipe.items() if v != full[k]}


def stored_recipe(data: dict[str, Any]) -> Recipe:
    """A variant's recipe as study.json stored it, in any version's format (flat names before the recipe held its parts,
    older names, fields added since): the one reader of stored recipes."""
    flat = Recipe.flatten(data)
    return Recipe.from_flat({**{k: f(flat) if callable(f) else f for k, f in ADDED_FIELDS.items()}, **flat})
