"""The study report: the aggregates against hand computations, intervals, improvement, laps lost, a report from a
hand-made study.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.studies.report import build, laps_lost_by_track, score_matrices
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


def test_the_report_states_levels_and_improvement_from_a_hand_made_study(tmp_path):
    rng = np.random.default_rng(0)
    episodes = []
    for head, offset in (("nac", 0.0), ("lstm", -300.0)):
        for seed in (0, 1):
            for level, drop in (("none", 0.0), ("drop=0.4", 200.0)):
                for s in range(100, 104):
                    episodes.append({"run": f"base/{head}/seed{seed}", "variant": "base", "head": head, "seed": seed, "level": level,
                                     "episode_seed": s, "return": 900.0 + offset - drop + rng.normal(0, 5), "lap_finished": offset == 0})
    runs = {e["run"]: {"done": True, "val_accuracy": 0.88, "seed": e["seed"]} for e in episodes}
    # stored as the last invocation left it (--first-seed 1 --seeds 1): the report names the runs' seeds
    config = {"heads": ["nac", "lstm"], "seeds": 1, "first_seed": 1, "variants": {"base": {}}, "demos": 3, "continuous": True,
              "expert": "track", "episodes": 4, "seed_start": 100, "levels": ["none", "drop=0.4"]}
    (tmp_path / "study.json").write_text(json.dumps({"format": "nacdrive-study/1", "config": config, "runs": runs, "episodes": episodes, "asked": list(runs)}))
    r = build(tmp_path, reps=100)
    assert set(r["levels"]) == {"none", "drop=0.4"}
    clean, dropped = r["levels"]["none"]["aggregates"], r["levels"]["drop=0.4"]["aggregates"]
    assert clean["nac"]["iqm"] == pytest.approx(900, abs=5) and dropped["nac"]["iqm"] == pytest.approx(700, abs=5)
    assert r["levels"]["none"]["improvement"]["nac > lstm"]["p"] == pytest.approx(1.0)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Perturbation drop=0.4" in text and "88.0%" in text and "training seeds 0..1;" in text
    assert "| 100 | 0 | 2 |" in text  # where the laps were lost: lstm's two runs on every track, nac's none
    assert "on tracks 100..103." in text  # neither the validation nor the test range
    assert "**Fewer than 5 training runs** in lstm (2), nac (2)" in text
    per_run = [line for line in text.splitlines() if line.startswith("| lstm | seed")]
    assert len(per_run) == 2 * 2 and "| 0% |" in per_run[0]  # each run at each level: its laps, none finished
    nac_runs = r["levels"]["none"]["aggregates"]["nac"]["per_run"]
    assert [p["mean"] for p in nac_runs] == pytest.approx([900, 900], abs=5) and all(p["laps"] == 1.0 for p in nac_runs)
    assert "| nac > lstm | 2, 2 | 1.00 [" in text
    assert (tmp_path / "report" / "levels.png").stat().st_size > 1000 and (tmp_path / "report" / "profiles.png").is_file()


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
