"""The study report: the aggregates against hand computations, intervals, improvement, laps lost, a report from a
hand-made study.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.studies.report import build, laps_lost_by_track, score_matrices


def test_score_matrices_use_the_seeds_every_run_has():
    ep = lambda run, s, r: {"run": run, "variant": "base", "head": "nac", "seed": 0, "level": "none", "episode_seed": s, "return": r, "lap_finished": r > 900}
    study = {"config": {"variants": {"base": {}}}, "episodes": [ep("a", 1, 910.0), ep("a", 2, 500.0), ep("b", 2, 700.0)]}
    m = score_matrices(study, "none")["nac"]
    assert m["seeds"] == [2] and m["runs"] == ["a", "b"] and m["scores"].tolist() == [[500.0], [700.0]]


def test_laps_lost_are_counted_per_track_and_group_most_first():
    ep = lambda run, head, s, lap: {"run": run, "variant": "base", "head": head, "seed": 0, "level": "none", "episode_seed": s, "return": 900.0 if lap else 300.0, "lap_finished": lap}
    laps = {("a", "nac"): [True, False, False], ("b", "nac"): [True, True, False], ("c", "lstm"): [False, True, True], ("expert", "expert"): [False, False, False]}
    study = {"config": {"variants": {"base": {}}}, "episodes": [ep(run, head, 10 + i, lap) for (run, head), ls in laps.items() for i, lap in enumerate(ls)]}
    lost = laps_lost_by_track(score_matrices(study, "none"))
    assert lost == {"12": {"nac": 2}, "10": {"lstm": 1}, "11": {"nac": 1}}  # the expert's own laps are not counted
    assert list(lost) == ["12", "10", "11"]


def test_offline_agreement_is_spearmans_rank_correlation_oriented_so_better_is_positive():
    from agents.studies.report import offline_agreement

    runs = {f"base/nac/seed{i}": {"val_accuracy": a, "val_loss": l} for i, (a, l) in enumerate([(0.80, 0.03), (0.85, 0.02), (0.90, 0.01)])}
    mats = {"nac": {"runs": sorted(runs), "scores": np.array([[700.0, 720.0], [800.0, 790.0], [900.0, 910.0]])},
            "expert": {"runs": ["expert"], "scores": np.array([[930.0, 925.0]])}}
    study = {"runs": runs}
    acc = offline_agreement(study, mats, "val_accuracy")
    mse = offline_agreement(study, mats, "val_loss")
    assert acc["runs"] == 3 and acc["spearman"] == pytest.approx(1.0) and mse["spearman"] == pytest.approx(1.0)
    mats["nac"]["scores"] = mats["nac"]["scores"][::-1]  # better offline now drives worse
    assert offline_agreement(study, mats, "val_accuracy")["spearman"] == pytest.approx(-1.0)


def test_a_study_json_of_the_oldest_format_still_reads(tmp_path):
    # as the first studies wrote it: no "asked", "recipes", "task", "perturb_episodes", episode "skipped" or CPU times
    episodes = [{"run": f"base/nac/seed{k}", "variant": "base", "head": "nac", "seed": k, "level": "none", "episode_seed": 10_000 + s,
                 "return": 880.0 + 10 * k + s, "lap_finished": True} for k in range(3) for s in range(5)]
    episodes += [{"run": "expert", "variant": "-", "head": "expert", "seed": 0, "level": "none", "episode_seed": 10_000 + s, "return": 920.0,
                  "lap_finished": True} for s in range(5)]
    config = {"heads": ["nac"], "seeds": 3, "first_seed": 0, "variants": {"base": {}}, "demos": 50, "continuous": True, "expert": "track",
              "episodes": 5, "seed_start": 10_000, "levels": ["none"]}
    runs = {f"base/nac/seed{k}": {"done": True, "val_accuracy": 0.9} for k in range(3)}
    (tmp_path / "study.json").write_text(json.dumps({"format": "nacdrive-study/1", "config": config, "runs": runs, "episodes": episodes}))
    r = build(tmp_path, reps=100)
    nac = r["levels"]["none"]["aggregates"]["nac"]
    assert nac["run_means"] == [882.0, 892.0, 902.0] and nac["lost_to_skipped_tile"] is None and r["cost"] is None
    text = (tmp_path / "report" / "report.md").read_text()
    assert "validation tracks 10000..10004" in text and "Runs trained: 3 of 3" in text and "| nac | seed2 | 902.0 |" in text
