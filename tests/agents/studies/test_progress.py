"""A study's progress: runs and episodes of its own grid, and an ETA from the times measured so far."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.studies.progress import Progress


def study(runs: dict, episodes: list[str]) -> SimpleNamespace:
    return SimpleNamespace(data={"runs": runs, "episodes": [{"run": r} for r in episodes]})


def test_it_counts_the_grids_own_runs_and_episodes():
    s = study({"a": {"done": True}, "b": {}, "other": {"done": True}}, ["a", "a", "expert", "other"])
    p = Progress(s, grid=["a", "b"], total_eps=10, capacity=2, quiet=True)
    assert (p.runs_done(), p.episodes_done()) == (1, 3)  # another invocation's run is not this grid's
    assert p.summary() == "runs trained 1/2, episodes 3/10"


def test_no_eta_before_a_run_was_timed_then_one_from_the_measured_times(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("agents.studies.progress.time.monotonic", lambda: clock[0])
    s = study({"a": {}, "b": {}}, [])
    p = Progress(s, grid=["a", "b"], total_eps=4, capacity=1, quiet=True)
    assert p.eta_minutes() is None  # runs left and none timed yet
    p.trained(60.0)
    s.data["runs"]["a"]["done"] = True
    s.data["episodes"] += [{"run": "a"}, {"run": "a"}]
    clock[0] += 60.0 + 2 * 30.0  # the run's minute, then two episodes of 30 s on the one worker
    # one run left at 60 s and two episodes at 30 s each: 2 minutes
    assert p.eta_minutes() == pytest.approx(2.0)
