"""A study's progress: runs and episodes of its own grid, and an ETA from the times measured so far."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.studies.progress import Progress


def study(runs: dict, episodes: list[tuple[str, str, int]]) -> SimpleNamespace:
    """A StudyFile's runs and its episodes' keys, (run, level, seed) as StudyFile.episode_key makes them."""
    return SimpleNamespace(data={"runs": runs}, keys=set(episodes))


def asked(runs: list[str], levels: list[str], seeds: range) -> set[tuple[str, str, int]]:
    return {(r, level, s) for r in runs for level in levels for s in seeds}


def test_it_counts_the_grids_own_runs_and_episodes():
    # study.json also holds another invocation's run, a level this command does not drive and a seed beyond its range
    s = study({"a": {"done": True}, "b": {}, "other": {"done": True}},
              [("a", "none", 0), ("a", "none", 1), ("expert", "none", 0), ("other", "none", 0), ("expert", "noise", 0), ("a", "none", 7)])
    p = Progress(s, grid=["a", "b"], asked=asked(["a", "b", "expert"], ["none"], range(2)), capacity=2, quiet=True)
    assert (p.runs_done(), p.episodes_done(), p.total_eps) == (1, 3, 6)
    assert p.summary() == "runs trained 1/2, episodes 3/6"
    p.diverged("b: its loss is not finite", "b")  # a diverged run's episodes leave the total
    assert p.summary() == "runs trained 1/2, episodes 3/4"


def test_no_eta_before_a_run_was_timed_then_one_from_the_measured_times(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("agents.studies.progress.time.monotonic", lambda: clock[0])
    s = study({"a": {}, "b": {}}, [])
    p = Progress(s, grid=["a", "b"], asked=asked(["a", "b"], ["none"], range(2)), capacity=1, quiet=True)
    assert p.eta_minutes() is None  # runs left and none timed yet
    p.trained(60.0)
    s.data["runs"]["a"]["done"] = True
    s.keys |= {("a", "none", 0), ("a", "none", 1)}
    clock[0] += 60.0 + 2 * 30.0  # the run's minute, then two episodes of 30 s on the one worker
    # one run left at 60 s and two episodes at 30 s each: 2 minutes
    assert p.eta_minutes() == pytest.approx(2.0)
