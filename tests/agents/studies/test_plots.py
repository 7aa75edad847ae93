"""A report's figures: which are drawn for which levels, and the level names they read."""

from __future__ import annotations

from agents.studies import plots


def _agg(iqm: float, runs: int = 2) -> dict:
    return {"iqm": iqm, "iqm_ci": [iqm - 5, iqm + 5] if runs > 1 else None, "mean": iqm, "mean_ci": None, "run_means": [iqm] * runs}


def test_level_names_and_scenario_columns():
    assert plots.level_value("drop=0.4") == ("drop", 0.4) and plots.level_value("none") == ("none", 0.0)
    assert plots.scenario_columns(["none", "color", "drop=0.2", "color+jitter=3"]) == [("none", "clean"), ("color", "color")]


def test_each_figure_is_drawn_for_the_levels_that_have_it(tmp_path):
    clean = {"aggregates": {"nac": _agg(920), "expert": _agg(923, runs=1)}, "improvement": {}}
    (tmp_path / "a").mkdir()
    only_clean = plots.draw({"levels": {"none": clean}}, tmp_path / "a")
    assert [p.rsplit("/", 1)[-1] for p in only_clean] == ["aggregates.png"]
    levels = {"none": {**clean, "improvement": {"nac > lstm": {"p": 0.6, "ci": [0.2, 0.9]}}},
              "drop=0.4": {"aggregates": {"nac": _agg(800)}, "improvement": {}},
              "color": {"aggregates": {"nac": _agg(900), "expert": _agg(923, runs=1)}, "improvement": {}}}
    (tmp_path / "b").mkdir()
    files = plots.draw({"levels": levels}, tmp_path / "b")
    assert [p.rsplit("/", 1)[-1] for p in files] == ["aggregates.png", "improvement.png", "scenarios.png", "levels.png"]
    assert all((tmp_path / "b" / name).stat().st_size > 1000 for name in ("aggregates.png", "improvement.png", "scenarios.png", "levels.png"))
