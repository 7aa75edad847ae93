"""A study's figures per group (agents.studies.aggregates): IQM and mean by hand, intervals the same at every rebuild,
none for one run, P(X > Y) over runs, rliable's score shares."""

from __future__ import annotations


import numpy as np
import pytest

from agents.studies.aggregates import aggregates, probability_of_improvement, score_shares


# ---------------------------------------------------------------------- the statistics
def test_iqm_and_mean_match_a_hand_computation():
    # 2 runs x 4 episodes: the 8 returns sorted are 100 200 300 400 500 600 700 800; the IQM is the
    # mean of the middle half, (300 + 400 + 500 + 600) / 4 = 450, whatever the outliers.
    x = np.array([[100.0, 800.0, 300.0, 600.0], [500.0, 200.0, 700.0, 400.0]])
    out = aggregates({"a": x, "b": x + [[0, 10_000, 0, 0], [0, 0, 0, 0]]}, reps=300)
    assert out["a"]["iqm"] == pytest.approx(450.0)
    assert out["a"]["mean"] == pytest.approx(450.0)
    assert out["b"]["iqm"] == pytest.approx(450.0)  # one outlier moves the mean, not the IQM
    assert out["b"]["mean"] == pytest.approx(450.0 + 10_000 / 8)
    lo, hi = out["a"]["iqm_ci"]
    assert lo < 450.0 < hi
    assert out["a"]["run_means"] == [450.0, 450.0] and out["a"]["worst_run_mean"] == 450.0


def test_intervals_are_the_same_at_every_rebuild_and_whatever_else_the_study_holds():
    rng = np.random.default_rng(1)
    a, b = rng.normal(900, 30, (3, 20)), rng.normal(800, 90, (3, 20))
    alone, with_b = aggregates({"a": a}, reps=300), aggregates({"a": a, "b": b}, reps=300)
    again = aggregates({"b": b, "a": a}, reps=300)
    assert alone["a"]["iqm_ci"] == with_b["a"]["iqm_ci"] == again["a"]["iqm_ci"] and with_b["b"]["mean_ci"] == again["b"]["mean_ci"]
    assert probability_of_improvement(a, b, reps=100) == probability_of_improvement(a, b, reps=100)


def test_one_run_has_no_interval():
    out = aggregates({"a": np.array([[1.0, 2.0, 3.0]])}, reps=100)
    assert out["a"]["iqm_ci"] is None and out["a"]["mean"] == pytest.approx(2.0) and out["a"]["run_std"] is None


def test_probability_of_improvement_is_over_runs_with_the_runs_needed():
    rng = np.random.default_rng(0)
    x = rng.normal(900, 20, (3, 10))
    same = probability_of_improvement(x, x.copy(), reps=100)
    assert same["p"] == pytest.approx(0.5) and same["difference"] == 0.0 and same["runs_needed"] is None
    better = probability_of_improvement(x + 1000, x, reps=100)
    assert better["p"] == pytest.approx(1.0) and better["ci"][1] == 1.0 and better["runs"] == [3, 3]
    assert better["difference"] == pytest.approx(1000.0) and better["runs_needed"] == 2
    worse = probability_of_improvement(x - 1000, x, reps=100)
    assert worse["p"] == pytest.approx(0.0)


def test_score_shares_are_rliables_to_the_bit():
    from rliable import library

    rng = np.random.default_rng(3)
    taus = np.linspace(0.0, 1000.0, 101)
    for shape in ((3, 50), (1, 7), (2, 3), (4, 1)):
        s = rng.normal(700, 250, shape).round(1)
        assert (score_shares(s, taus) == library.score_distributions(s, taus)).all()
