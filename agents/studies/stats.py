"""Statistics where the training run is the unit.

A study's scores are, per group and level, a (runs, tracks) matrix of returns. The runs of a group
are independent draws of everything a training seed decides; the tracks are a sample of tracks,
and every run drives the same ones (a crossed design). One trained network drives all its tracks,
so its episodes share its seed's luck: counting episodes as if each were a run (rliable's
stratified bootstrap with tracks as its "tasks", made for suites where every task has training
runs of its own) leaves the run-to-run spread out of the interval.

The IQM's and the mean's interval is Student's t around the statistic, with a standard error from a
bootstrap that resamples each source of variation on its own: the runs of the group (whole runs,
every track of a run with it), and the tracks (the same resample for every run: the design is
crossed, and pairs stay paired). Each source's bootstrap variance is scaled by n / (n - 1), the
shrinkage a bootstrap of n draws has, and the t quantile takes the degrees of freedom of the
scarcest source (the runs less one): a group of 2 or 3 runs gets the wide interval its few draws
warrant. On the tests' synthetic studies these intervals hold the true value in 95-99 % of draws for
2 to 10 runs, where rliable's stratified bootstrap held it in 27-48 %.

P(X > Y) is the chance that a run of X beats a run of Y, each run scored by its mean over the same
tracks: the Mann-Whitney statistic of the two groups' run means (rliable's probability of
improvement with one score per run). Its interval is Newcombe's score interval for that statistic
(Newcombe 2006, Statistics in Medicine 25:559, method 5: the Hanley-McNeil variance with the two
group sizes replaced by their mean, inverted at each candidate value, so that it stays inside
[0, 1] and does not collapse when every run of X beats every run of Y), its variance widened by the
tracks' share from the bootstrap above.

rliable has none of these estimators (its intervals resample within each task); written here, and
their coverage is checked by tests/agents/studies/test_stats.py against synthetic studies with
known answers.

Statistics take arrays with leading resample axes: (..., runs, tracks) -> (...), so that every
resample of a bootstrap is one vectorised call.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

LEVEL = 0.95  # every interval's coverage
FEW_RUNS = 5  # a group with fewer runs is flagged in a report: its intervals are wide, its P(X > Y) coarse
POWER = 0.8  # runs_needed: the chance of separating the observed difference at LEVEL
RUNS_CAP = 1000  # runs_needed stops counting here
EDGE = 1e-9  # improvement_interval: how near 0 or 1 its search starts


def mean(s: np.ndarray) -> np.ndarray:
    return s.mean(axis=(-2, -1))


def iqm(s: np.ndarray) -> np.ndarray:
    """The interquartile mean of all (run, track) scores, rliable's metrics.aggregate_iqm to the bit
    (scipy's trim_mean of a quarter each side), over the last two axes at once: rliable's goes
    through scipy's argument handling, ten times the statistic in each resample."""
    a = s.reshape(*s.shape[:-2], -1)
    n = a.shape[-1]
    low = int(0.25 * n)
    return np.mean(np.partition(a, (low, n - low - 1), axis=-1)[..., low:n - low], axis=-1)


def improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) over runs: the chance that a run of X has a higher mean over the tracks than a run
    of Y on the same tracks (a tie counts a half). x: (..., runs X, tracks), y: (..., runs Y,
    tracks). rliable's metrics.probability_of_improvement given one score per run (one task),
    computed over every resample at once."""
    d = x.mean(axis=-1)[..., :, None] - y.mean(axis=-1)[..., None, :]
    return ((d > 0) + 0.5 * (d == 0)).mean(axis=(-2, -1))


def _resample(rng: np.random.Generator, arrays: list[np.ndarray], which: int | None, reps: int) -> list[np.ndarray]:
    """`reps` resamples of `arrays` (each (runs, tracks), same tracks): the runs of array `which`
    drawn with replacement, or (which None) the tracks, the same draw for every array."""
    if which is None:
        cols = rng.integers(0, arrays[0].shape[1], (reps, arrays[0].shape[1]))
        return [a[:, cols].transpose(1, 0, 2) for a in arrays]  # (reps, runs, tracks)
    rows = rng.integers(0, arrays[which].shape[0], (reps, arrays[which].shape[0]))
    return [a[rows] if i == which else np.broadcast_to(a, (reps, *a.shape)) for i, a in enumerate(arrays)]


def variance_components(stat: Callable[..., np.ndarray], arrays: Sequence[np.ndarray], reps: int = 2000,
                        seed: int = 0) -> list[tuple[float, int]]:
    """(variance, degrees of freedom) of `stat` from each source of variation: the runs of each
    array, then the tracks. Each is the bootstrap variance of the statistic when only that source is
    resampled, times n / (n - 1); a source with one draw contributes nothing."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    out = []
    for which, n in [*enumerate(a.shape[0] for a in arrays), (None, arrays[0].shape[1])]:
        if n < 2:
            continue
        v = float(np.var(stat(*_resample(rng, arrays, which, reps)))) * n / (n - 1)
        out.append((v, n - 1))
    return out


def interval(stat: Callable[[np.ndarray], np.ndarray], scores: np.ndarray, reps: int = 2000, seed: int = 0,
             level: float = LEVEL, bounds: tuple[float, float] = (-np.inf, np.inf)) -> list[float] | None:
    """The `level` interval of `stat(scores)` (scores: runs x tracks) over runs and tracks (the
    module's docstring), within `bounds` (the values a score can take); None for a single run: one
    draw of a training seed says nothing of the next."""
    from scipy.stats import t

    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape[0] < 2:
        return None
    point = float(stat(scores))
    comps = variance_components(stat, [scores], reps, seed)
    v = sum(c for c, _ in comps)
    half = float(t.ppf(0.5 + level / 2, min(d for _, d in comps))) * np.sqrt(v)
    return [float(max(point - half, bounds[0])), float(min(point + half, bounds[1]))]


def _newcombe_variance(theta: float, m: int, n: int) -> float:
    """The variance of the Mann-Whitney statistic of m and n draws at the value theta (Hanley and
    McNeil's, with m and n replaced by their mean: Newcombe 2006, method 5)."""
    k = (m + n) / 2 - 1
    return theta * (1 - theta) / (m * n) * (1 + k * (1 - theta) / (2 - theta) + k * theta / (1 + theta))


def improvement_interval(x: np.ndarray, y: np.ndarray, reps: int = 2000, seed: int = 0, level: float = LEVEL) -> dict[str, Any]:
    """P(X > Y) over runs (`improvement`) with its `level` interval (the module's docstring): the
    values theta at which the observed P lies within z standard errors, the runs' variance
    Newcombe's at theta and the tracks' the bootstrap's. x, y: (runs, tracks) on the same tracks.
    No interval where a side has one run."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    p = float(improvement(x, y))
    m, n = x.shape[0], y.shape[0]
    if min(m, n) < 2:
        return {"p": p, "ci": None}
    tracks = variance_components(improvement, [x, y], reps, seed)[-1][0] if x.shape[1] > 1 else 0.0
    z = float(norm.ppf(0.5 + level / 2))
    gap = lambda theta: (p - theta) ** 2 - z * z * (_newcombe_variance(theta, m, n) + tracks)  # noqa: E731  # <= 0 inside
    inner = min(max(p, EDGE), 1 - EDGE)  # inside the interval: at p = 0 or 1 the gap is 0 at p itself
    lo = 0.0 if gap(0.0) <= 0 else brentq(gap, 0.0, inner)
    hi = 1.0 if gap(1.0) <= 0 else brentq(gap, inner, 1.0)
    return {"p": p, "ci": [float(lo), float(hi)]}


def runs_needed(x: np.ndarray, y: np.ndarray, level: float = LEVEL, power: float = POWER) -> int | None:
    """Runs per group that a two-sided t-test of run means would need to separate the difference of
    run means observed between X and Y, at `level` with `power`, given the run-to-run spread
    (pooled over both groups). None where the spread cannot be estimated (one run each) or no
    difference was observed; RUNS_CAP + 1 where it would need more than RUNS_CAP."""
    from scipy.stats import nct, t

    xm, ym = np.asarray(x, dtype=np.float64).mean(axis=-1), np.asarray(y, dtype=np.float64).mean(axis=-1)
    dof = len(xm) + len(ym) - 2
    d = abs(xm.mean() - ym.mean())
    if dof < 1 or d == 0:
        return None
    s = np.sqrt((((xm - xm.mean()) ** 2).sum() + ((ym - ym.mean()) ** 2).sum()) / dof)
    if s == 0:
        return 2
    def enough(n: int) -> bool:  # the test's power with n runs a side reaches `power`
        df = 2 * n - 2
        crit = t.ppf(0.5 + level / 2, df)
        nc = d / (s * np.sqrt(2 / n))
        return nct.sf(crit, df, nc) + nct.cdf(-crit, df, nc) >= power

    if enough(2):
        return 2
    # the power grows with n: double until enough (far past it the noncentral t's tail is no longer computable, so the
    # bracket is found from below), then bisect for the first n that is enough (not enough at lo, enough at hi)
    lo, hi = 2, 4
    while not enough(min(hi, RUNS_CAP)):
        if hi >= RUNS_CAP:
            return RUNS_CAP + 1
        lo, hi = hi, 2 * hi
    hi = min(hi, RUNS_CAP)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def per_run(scores: np.ndarray, laps: np.ndarray, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Each run's own figures over the tracks: mean, IQM, share of laps finished, worst track."""
    out = []
    for row, lap in zip(np.asarray(scores, dtype=np.float64), np.asarray(laps, dtype=bool)):
        worst = int(np.argmin(row))
        out.append({"mean": float(row.mean()), "iqm": float(iqm(row[None])), "laps": float(lap.mean()),
                    "worst": float(row[worst]), "worst_track": int(seeds[worst])})
    return out
