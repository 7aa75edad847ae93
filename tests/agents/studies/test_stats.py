"""Run-level statistics against known answers: synthetic studies in which each training run adds one
offset to all its tracks, each track one offset to every run, and each episode its own noise.

The coverage tests draw many such studies, build each interval, and count how often it holds the
true value; today's method (rliable's stratified bootstrap with the tracks as its tasks, which the
reports used before) is measured beside it on the same draws. About 20 s in all on one core, most of it
rliable's bootstrap.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from agents.studies import stats

TRUE = 900.0


def study(rng: np.random.Generator, runs: int, tracks: int, run_sd: float = 30.0, track_sd: float = 10.0, noise_sd: float = 10.0,
          offset: float = 0.0, track_effect: np.ndarray | None = None) -> np.ndarray:
    """(runs, tracks) returns: TRUE + offset + a run's offset + a track's offset + an episode's noise."""
    b = rng.normal(0, track_sd, (1, tracks)) if track_effect is None else track_effect
    return TRUE + offset + rng.normal(0, run_sd, (runs, 1)) + b + rng.normal(0, noise_sd, (runs, tracks))


def covered(ci: list[float] | None, value: float) -> bool:
    return ci is not None and ci[0] <= value <= ci[1]


def rliable_interval(s: np.ndarray, seed: int) -> list[float]:
    """The interval the reports gave before: rliable's stratified bootstrap, tracks as tasks."""
    from rliable import library as rly

    np.random.seed(seed)  # rliable draws from numpy's global generator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = rly.get_interval_estimates({"g": s}, lambda x: np.array([x.mean()]), reps=200, task_bootstrap=True)[1]["g"]
    return [float(ci[0, 0]), float(ci[1, 0])]


# ---------------------------------------------------------------------- coverage
@pytest.mark.parametrize("runs", [5, 10])
def test_group_intervals_cover_the_true_value_about_95_percent_where_rliables_did_not(runs):
    rng = np.random.default_rng(runs)
    draws = 200
    hits = {"mean": 0, "iqm": 0, "rliable": 0}
    for i in range(draws):
        s = study(rng, runs, 20)
        hits["mean"] += covered(stats.interval(stats.mean, s, reps=300, seed=i), TRUE)
        hits["iqm"] += covered(stats.interval(stats.iqm, s, reps=300, seed=i), TRUE)  # symmetric effects: the IQM's true value is TRUE too
        hits["rliable"] += covered(rliable_interval(s, i), TRUE)
    share = {k: v / draws for k, v in hits.items()}
    assert 0.91 <= share["mean"] <= 0.995 and 0.91 <= share["iqm"] <= 0.995, share
    assert share["rliable"] < 0.6, share  # it leaves the run-to-run spread out: far too narrow


@pytest.mark.parametrize("runs", [2, 3])
def test_groups_of_two_and_three_runs_get_intervals_wide_enough_to_cover(runs):
    rng = np.random.default_rng(100 + runs)
    draws = 200
    hits, widths, rl = 0, [], 0
    for i in range(draws):
        s = study(rng, runs, 20)
        ci = stats.interval(stats.mean, s, reps=300, seed=i)
        hits += covered(ci, TRUE)
        widths.append(ci[1] - ci[0])
        rl += covered(rliable_interval(s, i), TRUE)
    assert hits / draws >= 0.93, hits / draws
    assert rl / draws < 0.5
    # and wider than a group of 10 runs' by far: few runs, little said
    ten = [np.diff(stats.interval(stats.mean, study(rng, 10, 20), reps=300, seed=i))[0] for i in range(20)]
    assert np.median(widths) > 2.5 * np.median(ten)


def test_where_the_tracks_vary_most_the_interval_still_covers():
    rng = np.random.default_rng(7)
    draws = 200
    hits = sum(covered(stats.interval(stats.mean, study(rng, 5, 30, run_sd=3.0, track_sd=25.0), reps=300, seed=i), TRUE) for i in range(draws))
    assert 0.93 <= hits / draws <= 1.0


def test_one_run_has_no_interval_and_intervals_stay_within_bounds():
    s = np.array([[1.0, 2.0, 3.0]])
    assert stats.interval(stats.mean, s) is None
    wide = np.array([[990.0, 995.0], [100.0, 120.0], [999.0, 985.0]])
    lo, hi = stats.interval(stats.mean, wide, reps=200, bounds=(-200.0, 1000.0))
    assert hi == 1000.0 and -200.0 <= lo < float(wide.mean())
    same = np.full((3, 4), 900.0)
    assert stats.interval(stats.iqm, same, reps=50) == [900.0, 900.0]


def test_intervals_are_the_same_at_every_rebuild():
    rng = np.random.default_rng(1)
    s = study(rng, 4, 10)
    state = np.random.get_state()[1].copy()
    assert stats.interval(stats.iqm, s, reps=200, seed=3) == stats.interval(stats.iqm, s, reps=200, seed=3)
    assert (np.random.get_state()[1] == state).all()  # numpy's global generator is neither used nor moved


# ---------------------------------------------------------------------- P(X > Y) over runs
@pytest.mark.parametrize("runs", [3, 5, 10])
def test_two_equal_heads_give_p_near_half_and_an_interval_that_holds_it(runs):
    rng = np.random.default_rng(200 + runs)
    draws = 200
    ps, hits = [], 0
    for i in range(draws):
        tracks = rng.normal(0, 10, (1, 20))  # the same tracks for both heads
        x, y = study(rng, runs, 20, track_effect=tracks), study(rng, runs, 20, track_effect=tracks)
        r = stats.improvement_interval(x, y, reps=200, seed=i)
        ps.append(r["p"])
        hits += covered(r["ci"], 0.5)
    assert abs(np.mean(ps) - 0.5) < 0.05
    assert hits / draws >= 0.92, hits / draws


def test_a_real_difference_is_separated_with_enough_runs():
    rng = np.random.default_rng(5)
    draws, separated = 100, 0
    for i in range(draws):
        tracks = rng.normal(0, 10, (1, 20))
        x, y = study(rng, 10, 20, offset=60.0, track_effect=tracks), study(rng, 10, 20, track_effect=tracks)  # 2 run sds apart
        r = stats.improvement_interval(x, y, reps=200, seed=i)
        separated += r["ci"][0] > 0.5
        assert r["ci"][0] <= r["p"] <= r["ci"][1]
    assert separated / draws > 0.8


def test_p_counts_runs_not_episodes():
    # X's three runs: two above every Y run on most tracks, one that loses whole tracks; Y steady
    y = np.full((3, 10), 900.0) + np.arange(3)[:, None]
    x = np.full((3, 10), 920.0)
    x[2, :5] = 100.0  # the weak run: its mean 510
    r = stats.improvement_interval(x, y, reps=200)
    assert r["p"] == pytest.approx(6 / 9)  # two of X's runs beat all three of Y's, the third none
    assert r["ci"][0] < 0.5 < r["ci"][1]  # three runs a side cannot separate that
    alone = stats.improvement_interval(x[:1], y, reps=200)
    assert alone["ci"] is None and alone["p"] == 1.0


def test_improvement_is_rliables_probability_of_improvement_with_one_score_per_run():
    from rliable import metrics

    rng = np.random.default_rng(2)
    for runs_x, runs_y in ((3, 3), (2, 5), (6, 4)):
        x, y = rng.normal(900, 40, (runs_x, 30)), rng.normal(890, 60, (runs_y, 30))
        ours = float(stats.improvement(x, y))
        assert ours == metrics.probability_of_improvement(x.mean(axis=1, keepdims=True), y.mean(axis=1, keepdims=True))
    x = np.array([[1.0, 3.0], [2.0, 2.0]])  # run means 2, 2
    assert float(stats.improvement(x, x)) == 0.5  # ties count a half


def test_an_interval_never_collapses_where_every_run_beats_every_other():
    x, y = np.full((5, 8), 950.0), np.full((5, 8), 800.0)
    r = stats.improvement_interval(x, y, reps=100)
    assert r["p"] == 1.0 and 0.5 < r["ci"][0] < 0.9 and r["ci"][1] == 1.0
    r3 = stats.improvement_interval(x[:3], y[:3], reps=100)
    assert r3["ci"][0] < r["ci"][0]  # fewer runs, less certain


# ---------------------------------------------------------------------- runs needed, per run
@pytest.mark.parametrize("effect, n", [(1.0, 17), (0.8, 26), (0.5, 64)])
def test_runs_needed_matches_the_two_sample_t_tests_table(effect, n):
    # Cohen's table for a two-sided t-test at 5 % with 80 % power: d 1.0 -> 17, 0.8 -> 26, 0.5 -> 64 per group
    base = np.array([-1.0, 1.0, -1.0, 1.0]) * np.sqrt(3 / 4)  # four runs, sd 1 (ddof 1)
    x = (900.0 + 10 * effect + 10 * base)[:, None] * np.ones((1, 5))
    y = (900.0 + 10 * base)[:, None] * np.ones((1, 5))
    assert stats.runs_needed(x, y) == n


def test_runs_needed_where_it_cannot_be_said():
    x = np.full((1, 4), 900.0)
    assert stats.runs_needed(x, x + 5) is None  # one run each: no spread to judge by
    y = np.full((3, 4), 900.0)
    assert stats.runs_needed(y, y) is None  # no difference observed
    assert stats.runs_needed(y + 1, y) == 2  # no spread at all
    noisy = y + np.array([[-50.0], [0.0], [50.0]])
    assert stats.runs_needed(noisy + 0.01, noisy) == stats.RUNS_CAP + 1


def test_per_run_figures_by_hand():
    s = np.array([[100.0, 800.0, 300.0, 600.0], [900.0, 910.0, 905.0, 50.0]])
    laps = np.array([[False, True, False, True], [True, True, True, False]])
    rows = stats.per_run(s, laps, [10, 11, 12, 13])
    assert rows[0] == {"mean": 450.0, "iqm": 450.0, "laps": 0.5, "worst": 100.0, "worst_track": 10}
    assert rows[1]["worst_track"] == 13 and rows[1]["laps"] == 0.75 and rows[1]["iqm"] == pytest.approx((900 + 905) / 2)


def test_iqm_is_rliables_to_the_bit_over_leading_axes():
    from rliable import metrics

    rng = np.random.default_rng(3)
    for shape in ((3, 50), (1, 7), (2, 3), (4, 1)):
        s = rng.normal(700, 250, shape).round(1)
        assert float(stats.iqm(s)) == metrics.aggregate_iqm(s)
    many = rng.normal(700, 250, (6, 3, 50))
    assert np.array_equal(stats.iqm(many), [stats.iqm(m) for m in many])
