"""A study's figures per group of runs: IQM and mean with intervals over runs and tracks, each run's own, the
probability that one group's runs beat another's, and performance profiles (rliable)."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import numpy as np

from agents.carracing.env import RETURN_BOUNDS
from agents.studies import stats


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """numpy's global generator seeded within, restored after: rliable's StratifiedBootstrap draws
    its resamples from it (update_indices calls np.random.choice) whatever random_state it is
    given, so without this a report's profile bands change from one rebuild to the next."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def aggregates(scores: dict[str, np.ndarray], reps: int = 2000, seed: int = 0, laps: dict[str, np.ndarray] | None = None,
               seeds: dict[str, list[int]] | None = None) -> dict[str, dict[str, Any]]:
    """Per group: IQM and mean with their 95 % intervals over runs and tracks (agents.studies.stats),
    and each run's own figures (`per_run`, where the laps and track seeds are given)."""
    out = {}
    for g, s in scores.items():  # each group from the same seed: its interval does not depend on the others in the study
        run_means = s.mean(axis=1)
        out[g] = {
            "runs": int(s.shape[0]), "episodes": int(s.shape[1]),
            "iqm": float(stats.iqm(s)), "iqm_ci": stats.interval(stats.iqm, s, reps, seed, bounds=RETURN_BOUNDS),
            "mean": float(s.mean()), "mean_ci": stats.interval(stats.mean, s, reps, seed, bounds=RETURN_BOUNDS),
            "run_means": [float(x) for x in run_means],
            "worst_run_mean": float(run_means.min()),
            "run_std": float(run_means.std(ddof=1)) if len(run_means) > 1 else None,  # the run-to-run spread of means
            "min_episode": float(s.min()),
            "episode_std": float(s.std(ddof=1)) if s.size > 1 else 0.0,  # over every (run, episode): the published tables' statistic
        }
        if laps is not None and seeds is not None:
            out[g]["per_run"] = stats.per_run(s, laps[g], seeds[g])
    return out


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """P(X > Y) over runs with its 95 % interval (agents.studies.stats.improvement_interval), the
    difference of the groups' mean run means, and the runs per group that would separate it.
    x, y: (runs, tracks) on the same tracks."""
    out = stats.improvement_interval(x, y, reps, seed)
    out.update(runs=[int(x.shape[0]), int(y.shape[0])], difference=float(x.mean() - y.mean()), runs_needed=stats.runs_needed(x, y))
    return out


def score_shares(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's score distribution (the share of scores above each tau), every tau at once: rliable's
    np.vectorize calls np.mean once per tau in each resample."""
    return (scores[..., None] > taus).mean(axis=(0, 1))


def performance_profiles(scores: dict[str, np.ndarray], taus: np.ndarray, reps: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Share of episodes with return >= tau, per group, with 95 % bootstrap bands where a group has several runs."""
    from rliable import library as rly  # rliable imports seaborn and arch: only when a report is made

    with warnings.catch_warnings(), _seeded(seed):
        warnings.simplefilter("ignore", FutureWarning)
        prof, cis = rly.create_performance_profile(scores, taus, custom_profile_func=score_shares, reps=reps)
    return {g: {"share": [float(v) for v in prof[g]], "ci": cis[g].tolist() if scores[g].shape[0] > 1 else None} for g in scores}
