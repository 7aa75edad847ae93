"""DAgger's rules between rounds (agents.training.rounds): more rounds while a run falls short, perturbed rollouts as
the run's gaps, a check's summary, the tracks with a bend."""

import numpy as np
import pytest

from agents.carracing.env import make_env
from agents.carracing.measures import sharpest_bend
from agents.training.dagger_config import DaggerConfig
from agents.training.rounds import (LOST_TILES, clean_mean_return, more_rounds, rollout_perturbation, round_seeds, wants_check)
from nac import ConfigError


def _split(trained, done):
    """(rounds, episodes) and the count of trained rounds, as more_rounds takes them."""
    rounds, episodes = trained
    return rounds, done, episodes


def test_more_rounds_go_on_while_the_rollouts_or_the_checked_weights_fall_short_up_to_the_cap():
    cfg = DaggerConfig(run="x", rounds=2, until=880.0, max_rounds=4, check=3)

    def checked(*worsts, rollouts=905.0):
        """Trained rounds whose weights drove three check episodes, one of them as `worsts` gives (return, share of the tiles), the
        others at 915 with every tile; each round's one clean rollout (seed = round) returned `rollouts`."""
        rounds = [{"round": i + 1, "trained": True, "seeds": [i + 1],
                   "check": {"returns": [915.0, w, 912.0], "tiles": [1.0, t, 1.0], "mean_return": (1827.0 + w) / 3}}
                  for i, (w, t) in enumerate(worsts)]
        return rounds, [{"seed": i + 1, "return": rollouts, "perturb": None} for i in range(len(worsts))]

    def more(cfg, done, rounds, episodes):
        return more_rounds(cfg, rounds, done, episodes)

    lost, slow, fine = (711.4, 0.81), (861.8, 0.962), (905.0, 1.0)  # a track lost; the longest check track a few tiles short at step 1000
    assert more(cfg, 2, *checked(fine, lost))  # a lost track (and a mean of 846.1): a third round
    low = DaggerConfig(run="x", rounds=2, until=800.0, max_rounds=4, check=3)
    assert more(low, 2, *checked(fine, lost)) and not more(low, 2, *checked(lost, fine))  # the lost track alone
    assert not more(cfg, 2, *checked(lost, slow))  # slow on a long track, not lost, a mean of 896.3, rollouts at 905: done
    # the same weights after rollouts averaging 669.9 (the 65 u/s seed-2 draw, which then lost two held-out tracks): a third round
    assert more(cfg, 2, *checked(lost, slow, rollouts=669.9))
    # every track kept, but a mean below until: another round
    assert more(DaggerConfig(run="x", rounds=2, until=900.0, max_rounds=4, check=3), 2, *checked(fine, slow))
    assert more(cfg, 3, *checked(fine, lost, lost)) and not more(cfg, 4, *checked(fine, lost, lost, lost))  # the cap
    # the edge: LOST_TILES itself is kept
    assert not more(cfg, 2, *checked(fine, (880.0, LOST_TILES))) and more(cfg, 2, *checked(fine, (880.0, LOST_TILES - 0.01)))

    def unchecked(done, rollouts=905.0):
        rounds, episodes = checked(*[fine] * (done - 1), rollouts=rollouts)
        return rounds + [{"round": done, "trained": True, "seeds": [done]}], episodes + [{"seed": done, "return": rollouts, "perturb": None}]

    # a check is wanted once per trained round that more_rounds judges: from `rounds` on, below the cap, not yet checked, and not
    # when the round's rollouts call for another round already
    assert [wants_check(cfg, unchecked(done)[0], done, unchecked(done)[1]) for done in (1, 2, 3, 4)] == [False, True, True, False]
    assert not wants_check(cfg, unchecked(2, rollouts=669.9)[0], 2, unchecked(2, rollouts=669.9)[1])
    rounds, episodes = checked(fine, lost)
    assert not wants_check(cfg, rounds, 2, episodes)  # checked already (an interrupted job resumes past it)
    # a check stored before checks kept each episode's tiles is driven again: the rule needs them
    del rounds[-1]["check"]["tiles"]
    assert wants_check(cfg, rounds, 2, episodes)
    assert not wants_check(DaggerConfig(run="x", rounds=2, until=880.0, max_rounds=4, check=0), unchecked(2)[0], 2, unchecked(2)[1])
    assert not wants_check(DaggerConfig(run="x", rounds=2), unchecked(2)[0], 2, unchecked(2)[1])  # no until: nothing to judge
    with pytest.raises(ConfigError, match=r"check must be a whole number in 0\.\."):
        DaggerConfig(run="x", check=-1)


def test_with_skips_a_check_episode_that_skipped_a_tile_calls_another_round():
    cfg = DaggerConfig(run="x", rounds=2, until=880.0, max_rounds=4, check=3, skips=True)

    def rounds(skipped):
        """Two trained rounds, the last one's check at 914 with every tile reached but `skipped` skipped per episode."""
        check = {"returns": [915.0, 896.0, 931.0], "tiles": [1.0, 0.99, 1.0], "skipped": skipped, "mean_return": 914.0}
        return [{"round": r, "trained": True, "seeds": [r], **({"check": check} if r == 2 else {})} for r in (1, 2)], \
            [{"seed": r, "return": 915.0, "perturb": None} for r in (1, 2)]

    assert more_rounds(cfg, *rounds([0, 1, 0])[:1], 2, rounds([0, 1, 0])[1])  # a lap lost to one skipped tile: a third round
    assert not more_rounds(cfg, *rounds([0, 0, 0])[:1], 2, rounds([0, 0, 0])[1])  # none skipped: done
    plain = DaggerConfig(run="x", rounds=2, until=880.0, max_rounds=4, check=3)
    assert not more_rounds(plain, *rounds([0, 1, 0])[:1], 2, rounds([0, 1, 0])[1])  # without skips the lost-track rule lets it through
    # a check stored before checks kept the skipped tiles is driven again when skips needs them, not otherwise
    old, episodes = rounds([0, 1, 0])
    del old[-1]["check"]["skipped"]
    assert wants_check(cfg, old, 2, episodes) and not wants_check(plain, old, 2, episodes)
    with pytest.raises(ConfigError, match="skips judges the check episodes"):
        DaggerConfig(run="x", rounds=2, skips=True)


def test_with_check_0_more_rounds_go_on_while_the_last_rollouts_fall_short_up_to_the_cap():
    cfg = DaggerConfig(run="x", rounds=2, until=880.0, max_rounds=3, check=0)

    def trained(*means, perturbed=None):
        """Trained rounds of one clean rollout each (seed = round), returning these means; `perturbed`: one more
        rollout per round, driven under jitter=3, returning that."""
        rounds = [{"round": i + 1, "trained": True, "seeds": [i + 1, 100 + i + 1]} for i in range(len(means))]
        episodes = [{"seed": i + 1, "return": m, "perturb": None} for i, m in enumerate(means)]
        if perturbed is not None:
            episodes += [{"seed": 100 + i + 1, "return": perturbed, "perturb": "jitter=3"} for i in range(len(means))]
        return rounds, episodes

    assert more_rounds(cfg, [], 0, []) and more_rounds(cfg, *_split(trained(700.0), 1))  # the rounds asked for, whatever their rollouts
    assert more_rounds(cfg, *_split(trained(910.0, 716.3), 2))  # the second round's rollouts fell short: a third
    assert not more_rounds(cfg, *_split(trained(910.0, 904.2), 2))  # they did not: done
    assert not more_rounds(cfg, *_split(trained(910.0, 716.3, 700.0), 3))  # the cap
    assert not more_rounds(DaggerConfig(run="x", rounds=2), *_split(trained(910.0, 716.3), 2))  # no until: exactly `rounds`
    # the clean rollouts judge, not those driven under a perturbation (which crash by design)
    assert not more_rounds(cfg, *_split(trained(910.0, 925.6, perturbed=126.7), 2))
    rounds, episodes = trained(910.0, 925.6, perturbed=126.7)
    only_perturbed = [e for e in episodes if e["perturb"]]
    assert not more_rounds(cfg, rounds, 2, only_perturbed)  # no clean rollout in the round: nothing to judge by
    episodes = [{"seed": 10, "return": 925.0, "perturb": None}, {"seed": 11, "return": 126.0, "perturb": "jitter=3"},
                {"seed": 12, "return": 905.0, "perturb": None}, {"seed": 99, "return": 0.0, "perturb": None}]
    assert clean_mean_return(episodes, [10, 11, 12]) == 915.0 and np.isnan(clean_mean_return(episodes, [11]))
    rounds, episodes = trained(910.0, 904.2)
    begun = [*rounds, {"round": 3, "trained": False, "seeds": [3]}]
    assert more_rounds(cfg, begun, 2, episodes)  # a round begun (rollouts recorded, then interrupted) is finished, whatever came after
    for bad, match in (({"until": -1.0}, r"until must be a number in \[0, "), ({"until": 880.0, "max_rounds": 2}, "must be more than rounds")):
        with pytest.raises(ConfigError, match=match):
            DaggerConfig(run="x", rounds=2, **bad)


def test_auto_perturbs_the_rollouts_as_the_run_s_windows_gap_its_frames():
    assert rollout_perturbation("auto", stride_jitter=3) == "jitter=3"  # NAC or CfC on the gap mix of 1..3 steps
    assert rollout_perturbation("auto", stride_jitter=1) is None  # regular windows: clean rollouts
    assert rollout_perturbation("none", stride_jitter=3) is None
    assert rollout_perturbation("drop=0.2", stride_jitter=1) == "drop=0.2"
    assert DaggerConfig(run="x").perturb == "auto"


def test_a_checks_summary_names_its_worst_episode_and_least_tiles():
    from agents.training.rounds import check_worst
    assert check_worst({"returns": [915.0, 711.4], "tiles": [1.0, 0.811]}) == "worst 711.4, least tiles 81%"
    assert check_worst({"returns": [915.0, 864.7]}) == "worst 864.7"  # a check kept before tiles were: its returns alone


def test_with_bend_each_round_drives_the_next_tracks_with_such_a_bend():
    every = DaggerConfig(run="x", episodes=3, seed_start=10000)
    assert round_seeds(every, 1) == [10000, 10001, 10002] and round_seeds(every, 2) == [10003, 10004, 10005]
    hairpins = DaggerConfig(run="x", episodes=2, seed_start=10000, bend=150.0)
    env = make_env(pixels=False)
    first, second = round_seeds(hairpins, 1), round_seeds(hairpins, 2)
    assert first[0] < first[1] < second[0] < second[1]
    for seed in range(10000, second[1] + 1):
        env.reset(seed=seed)
        assert (sharpest_bend(env) >= 150.0) == (seed in first + second)
    with pytest.raises(ConfigError, match=r"bend must be a number in \[0, 180\)"):
        DaggerConfig(run="x", bend=180.0)
