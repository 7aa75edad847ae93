"""The recipe, declared once: it holds collect's, train's and dagger's own recipe configs, its fields reach the jobs by
name, its flat names are the flags and variant keys, older spellings still read, and the presets are overrides."""

from __future__ import annotations

from dataclasses import fields

import pytest

from agents.training.collect import CollectConfig, DemosRecipe
from agents.training.dagger_config import DaggerConfig, DaggerRecipe
from agents.training.loop import CloningRecipe, TrainConfig
from agents.training.recipe import PRESETS, Recipe, check_preset, preset_recipe
from agents.training.retrain import RetrainRecipe
from nac.config import ConfigError

# a value other than the default for each recipe field, valid for a continuous NAC run
CHANGED = {"epochs": 3, "minutes": 5.0, "dagger_rounds": 3, "dagger_until": 800.0, "dagger_check": 4, "dagger_max_rounds": 5, "dagger_skips": True,
           "dagger_episodes": 6, "dagger_bend": 150.0, "dagger_epochs": 1, "dagger_minutes": 2.0, "dagger_average": 2, "dagger_select": "check", "dagger_select_episodes": 20, "dagger_beta": 0.2, "dagger_off_road_steps": 50,
           "dagger_takeover": 3.0, "dagger_perturb": "jitter=2", "window": 6, "stride_jitter": 2, "regular_share": 0.25, "arrival_windows": True,
           "shift": 2, "augment": "jitter", "select_episodes": 2, "lr": 3e-4, "ema": 0.99, "batch_size": 16, "loss": "l1", "balance": "none",
           "turn_weight": 0.0, "val_fraction": 0.1, "noise": 0.1, "scene": "domain-randomize", "consistency": 0.5,
           "net": {"nac": {"topk": 4}}, "retrain_below": 880.0, "retrain_attempts": 2, "retrain_episodes": 20}


def configs(recipe: Recipe) -> tuple[dict, dict]:
    t, d = recipe.train_config("d", "r", head="nac", seed=0), recipe.dagger_config("r", expert="track", seed=0)
    return {f.name: getattr(t, f.name) for f in fields(TrainConfig)}, {f.name: getattr(d, f.name) for f in fields(DaggerConfig)}


def test_every_recipe_field_reaches_the_training_or_the_dagger_rounds():
    assert set(CHANGED) == set(Recipe.names()), "a new recipe field: give it a changed value here"
    for name, value in CHANGED.items():
        if name in ("noise", "scene", "turn_weight") or name.startswith("retrain_"):  # the demonstrations' (collect --noise, --scene);
            continue  # the wheel-angle networks' (below); the guard's, which train_attempts reads (test_retrain, the study's test_study)
        given = {name: value, **({"dagger_max_rounds": 5} if name == "dagger_until" else {}),  # until needs its most rounds
                 **({"dagger_until": 800.0, "dagger_max_rounds": 5} if name == "dagger_skips" else {}),  # skips judges until's checks
                 **({"augment": "jitter"} if name == "consistency" else {})}  # and consistency an augmentation
        assert configs(Recipe.from_flat(given)) != configs(Recipe.from_flat({k: v for k, v in given.items() if k != name})), \
            f"{name} changes neither the training nor the DAgger rounds"
    t = Recipe.from_flat({"turn_weight": 2.0, "net": {"wheel_target": True}}).train_config("d", "r", head="nac", seed=0, continuous=False)
    assert t.turn_weight == 2.0


def test_the_recipe_holds_the_jobs_own_configs():
    """A recipe field is declared once, in its job's config: the recipe's parts are those configs, and each job's config is
    its part plus where it runs, so a field added to a part is the job's option, the recipe's and its flat name at once."""
    assert issubclass(TrainConfig, CloningRecipe) and issubclass(DaggerConfig, DaggerRecipe) and issubclass(CollectConfig, DemosRecipe)
    r = Recipe()
    assert (type(r.demos), type(r.bc), type(r.dagger), type(r.retrain)) == (DemosRecipe, CloningRecipe, DaggerRecipe, RetrainRecipe)
    names = Recipe.names()
    assert names["lr"] == ("bc", "lr") and names["dagger_rounds"] == ("dagger", "rounds") and names["noise"] == ("demos", "noise")
    assert names["retrain_below"] == ("retrain", "below")
    assert len(names) == sum(len(fields(c)) for c in (DemosRecipe, CloningRecipe, DaggerRecipe, RetrainRecipe))  # no name is two fields


def test_older_spellings_read_and_round_trip():
    r = preset_recipe("quickstart", {"shift": 2})
    assert Recipe.from_dict(r.to_dict()) == r == Recipe.from_flat(r.flat())  # nested (study.json today) and flat alike
    assert set(r.to_dict()) == {"demos", "bc", "dagger", "retrain"}
    assert Recipe.from_dict({k: v for k, v in r.to_dict().items() if k != "retrain"}).retrain.below == 0  # stored before the guard: off
    old = {**Recipe().flat(), "dagger_off_road": 30}  # a recipe stored before the field took DaggerConfig's name
    del old["dagger_off_road_steps"]
    assert Recipe.from_dict(old).dagger.off_road_steps == 30
    with pytest.raises(ConfigError, match="the DAgger rounds' beta must be a number in"):
        Recipe.from_flat({"dagger_beta": 1.5})


def test_the_defaults_are_the_components_own():
    t, d = configs(Recipe())
    assert (t["lr"], t["batch_size"], t["window"], t["augment"]) == (TrainConfig.lr, TrainConfig.batch_size, TrainConfig.window, "none")
    assert (d["rounds"], d["episodes"], d["epochs"], d["check"], d["perturb"]) == (DaggerConfig.rounds, 10, 2, DaggerConfig.check, "auto")


def test_a_preset_is_overrides_and_keeps_its_extra_rounds():
    assert preset_recipe("full") == Recipe() and PRESETS["full"].demos == 50
    q = preset_recipe("quickstart")
    assert (q.bc.epochs, q.dagger.epochs, q.bc.lr, q.dagger.beta, q.dagger.until, q.dagger.max_rounds) == (1, 1, 3e-4, 0.3, 880.0, 4)
    assert preset_recipe("quickstart", {"dagger_rounds": 4}).dagger.max_rounds == 6  # two extra rounds, as the preset allows
    assert preset_recipe("quickstart", {"dagger_rounds": 4, "dagger_max_rounds": 5}).dagger.max_rounds == 5  # unless told
    assert preset_recipe("quickstart", {"dagger": {"rounds": 4}}).dagger.max_rounds == 6  # overrides nested by part alike
    d = preset_recipe("quickstart-discrete", {"net": {"excess_scale": 10.0}})
    assert d.bc.net == {"wheel_target": True, "wheel_speed": "target", "excess_scale": 10.0} and d.bc.balance == "weights"  # nets merge
    r = preset_recipe("full-randmix")  # the full recipe's steps, randmix and the extra rounds (docs/studies/augment-runs/)
    assert (r.bc.epochs, r.bc.lr, r.bc.augment, r.dagger.until, r.dagger.max_rounds) == (Recipe().bc.epochs, Recipe().bc.lr, "randmix", 880.0, 4)
    c = preset_recipe("full-contrast")  # full-randmix with the ahead contrast as a fourth channel (docs/studies/augment-contrast/)
    assert c.changed(net={}) == r and c.bc.net == {"frame_input": "rgb+contrast-scaled", "contrast_from": "ahead"}
    assert preset_recipe("full-contrast", {"net": {"dropout": 0.1}}).bc.net["contrast_from"] == "ahead"  # a net override merges
    j = preset_recipe("full-contrast-jitter")  # full-contrast, a quarter of the frames' contrast from a random patch (docs/studies/contrast-reference/)
    assert j == preset_recipe("full-contrast", {"net": {"contrast_jitter": 0.25}}) and j.bc.net["contrast_jitter"] == 0.25
    g = preset_recipe("full-contrast-jitter-retrain")  # and the guard against weak runs
    assert g == j.changed(retrain_below=900.0) and (g.retrain.attempts, g.retrain.episodes) == (3, 50) and j.retrain.below == 0
    with pytest.raises(ConfigError, match="unknown recipe preset 'fast'; choose from full, full-randmix, full-contrast, full-contrast-jitter, "
                                          "full-contrast-jitter-retrain, quickstart, quickstart-discrete"):
        check_preset("fast")
    with pytest.raises(ConfigError, match="unknown recipe fields \\['epoch'\\]"):
        preset_recipe("quickstart", {"epoch": 2})


def test_a_pilotnet_run_takes_only_its_fields():
    t = Recipe.from_flat({"lr": 1e-3, "window": 4, "net": {"speed_output": True}}).train_config("d", "r", head="dense", seed=1, task="udacity")
    assert (t.lr, t.window, t.net, t.seed) == (1e-3, TrainConfig.window, {"speed_output": True}, 1)
