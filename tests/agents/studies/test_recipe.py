"""A study's variants: overrides of the full recipe or of a preset, checked when parsed."""

from __future__ import annotations

import pytest

from agents.studies.recipe import parse_variant
from nac.config import ConfigError


# ---------------------------------------------------------------------- configuration
def test_variants_parse_and_refuse():
    assert parse_variant("bc:dagger_rounds=0") == ("bc", {"dagger_rounds": 0})
    assert parse_variant("euler:net.nac.mode=euler,net.use_time=false") == ("euler", {"net": {"nac": {"mode": "euler"}, "use_time": False}})
    assert parse_variant("base") == ("base", {})
    with pytest.raises(ConfigError, match="unknown recipe field 'epoch'"):
        parse_variant("x:epoch=3")
    with pytest.raises(ConfigError, match="DAgger rounds' beta must be a number in"):
        parse_variant("x:dagger_beta=1.5")
    with pytest.raises(ConfigError, match="plain name"):
        parse_variant("a b:epochs=1")
    with pytest.raises(ConfigError, match="shift must be a whole number in 0..16"):
        parse_variant("x:shift=30")
    with pytest.raises(ConfigError, match=r"val-fraction must be a number in \(0, 1\)"):
        parse_variant("x:val_fraction=1")
    with pytest.raises(ConfigError, match="balance must be one of auto, weights, sampler, none"):
        parse_variant("x:balance=equal")
    with pytest.raises(ConfigError, match="DAgger rounds' with until, max-rounds \\(the most rounds in all\\) must be more than rounds"):
        parse_variant("x:dagger_until=880")
    # the extra rounds reach the runs' DAgger (dagger --until / --max-rounds); a recipe without them has exactly its rounds
    from agents.training.recipe import Recipe

    d = Recipe.from_dict(parse_variant("x:dagger_until=880,dagger_max_rounds=3")[1]).dagger_config("r", expert="track", seed=0)
    assert (d.rounds, d.until, d.max_rounds, d.check) == (2, 880.0, 3, 16) and Recipe().dagger_config("r", expert="track", seed=0).until == 0.0
    assert Recipe.from_dict(parse_variant("x:dagger_until=880,dagger_max_rounds=3,dagger_check=0")[1]).dagger_config("r", expert="track", seed=0).check == 0
    # the rounds' weights averaged as the discrete quick start's (dagger --average); by default a run keeps its last round's own
    assert Recipe.from_dict(parse_variant("x:dagger_average=3")[1]).dagger_config("r", expert="track", seed=0).average == 3
    assert Recipe().dagger_config("r", expert="track", seed=0).average == 1
    with pytest.raises(ConfigError, match=r"average must be a whole number in 1\.\."):
        parse_variant("x:dagger_average=0")
    # the turn weight reaches the runs' training (train --turn-weight), and only a wheel-angle network takes it
    t = Recipe.from_dict(parse_variant("x:turn_weight=4,net.wheel_target=true")[1]).train_config("d", "r", head="nac", seed=0, continuous=False)
    assert t.turn_weight == 4.0 and Recipe().train_config("d", "r", head="nac", seed=0).turn_weight == 0.0
    with pytest.raises(ConfigError, match="it is for wheel-angle networks"):
        parse_variant("x:turn_weight=4")


def test_the_study_trains_each_head_by_the_quick_starts_recipe_unless_told_otherwise():
    """The default recipe's frame gaps are the quick start's for each head and action space, and the same for every
    head (one rule: agents.training.bc.frame_gaps); a variant's own values win."""
    from agents.quickstart import QuickstartConfig
    from agents.training.recipe import Recipe

    def gaps(recipe, head, continuous=True):
        t = recipe.train_config("d", "r", head=head, seed=0, continuous=continuous)
        return t.stride_jitter, t.regular_share

    for head in ("nac", "cfc", "lstm", "mha"):
        for continuous in (True, False):
            q = QuickstartConfig(head=head, discrete=not continuous).train_config("d", "r")
            assert gaps(Recipe(), head, continuous) == (q.stride_jitter, q.regular_share)
    assert gaps(Recipe(), "nac") == (3, 0.5) and gaps(Recipe(), "gru") == gaps(Recipe(), "mha") == (3, 0.5) and gaps(Recipe(), "nac", False) == (1, 0.0)
    assert gaps(Recipe.from_flat({"stride_jitter": 1}), "nac") == (1, 0.5) and gaps(Recipe.from_flat({"stride_jitter": 2, "regular_share": 0.0}), "lstm") == (2, 0.0)
