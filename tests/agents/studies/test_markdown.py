"""A study's markdown report (agents.studies.markdown), from a hand-made study: its levels, groups and improvement."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.studies.report import build


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


def test_the_scene_summary_shows_each_weak_run_and_which_comparisons_separate(tmp_path):
    """Five runs a head in two scenes: in color every NAC run beats every LSTM run (a separation, in bold), clean they
    are level; the run-by-run table shows LSTM's one weak clean run that the pooled IQM hides."""
    rng = np.random.default_rng(1)
    episodes = []
    for head in ("nac", "lstm"):
        for seed in range(5):
            for level in ("none", "color"):
                base = 920.0 if level == "none" or head == "nac" else 600.0
                if head == "lstm" and seed == 3 and level == "none":
                    base = 700.0  # the weak run
                for s in range(100, 110):
                    episodes.append({"run": f"base/{head}/seed{seed}", "variant": "base", "head": head, "seed": seed, "level": level,
                                     "episode_seed": s, "return": base + rng.normal(0, 3), "lap_finished": True})
    runs = {e["run"]: {"done": True, "val_accuracy": 0.9, "seed": e["seed"]} for e in episodes}
    config = {"heads": ["nac", "lstm"], "seeds": 5, "first_seed": 0, "variants": {"base": {}}, "demos": 3, "continuous": True,
              "expert": "track", "episodes": 10, "seed_start": 100, "levels": ["none", "color"]}
    (tmp_path / "study.json").write_text(json.dumps({"format": "nacdrive-study/1", "config": config, "runs": runs, "episodes": episodes, "asked": list(runs)}))
    build(tmp_path, reps=200)
    text = (tmp_path / "report" / "report.md").read_text()
    summary = text.split("Run by run: the lowest run mean")[1]
    lstm_row = next(line for line in summary.splitlines() if line.startswith("| lstm | "))
    cells = [c.replace("/", " ").replace("(", " ").replace(")", " ").split() for c in lstm_row.strip("| ").split(" | ")[1:]]
    (low, mean, n), (low_color, mean_color, _) = [[float(v) for v in c] for c in cells]  # clean, color
    assert abs(low - 700) < 5 and abs(mean - (4 * 920 + 700) / 5) < 5 and n == 5  # the weak run, not hidden
    assert abs(low_color - 600) < 5 and abs(mean_color - 600) < 5
    row = next(line for line in text.splitlines() if line.startswith("| nac > lstm | ") and "**" in line)
    clean, color = row.split(" | ")[1:3]
    assert "**" not in clean and color.startswith("**1.00 [")  # clean: no separation; color: every NAC run above every LSTM run


def test_a_group_driven_part_way_is_named_once_with_its_fewest_runs(tmp_path):
    """NAC's second run is driven clean only (a study stopped mid-run): the warning names nac once, with 1 run."""
    rng = np.random.default_rng(2)
    episodes = []
    for seed, levels in ((0, ("none", "drop=0.4")), (1, ("none",))):
        for level in levels:
            for s in range(100, 104):
                episodes.append({"run": f"base/nac/seed{seed}", "variant": "base", "head": "nac", "seed": seed, "level": level,
                                 "episode_seed": s, "return": 900.0 + rng.normal(0, 5), "lap_finished": True})
    runs = {e["run"]: {"done": True, "seed": e["seed"]} for e in episodes}
    config = {"heads": ["nac"], "seeds": 2, "first_seed": 0, "variants": {"base": {}}, "demos": 3, "continuous": True,
              "expert": "track", "episodes": 4, "seed_start": 100, "levels": ["none", "drop=0.4"]}
    (tmp_path / "study.json").write_text(json.dumps({"format": "nacdrive-study/1", "config": config, "runs": runs, "episodes": episodes, "asked": list(runs)}))
    build(tmp_path, reps=50)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "**Fewer than 5 training runs** in nac (1):" in text
