"""Studies: the aggregates against hand computations, the grid run end to end, resume after a kill,
the Ray path against the process path, and the report rebuilt from study.json alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.training.recipe import Recipe

from agents.training.dagger_config import DaggerConfig
from agents.studies import recipe, store
from agents.studies.grid import StudyConfig
from agents.studies.recipe import parse_variant
from agents.studies.study import run_study
from agents.studies.report import build
from nac.config import ConfigError
from tests.limits import seconds

TINY = {"epochs": 1, "dagger_rounds": 1, "dagger_episodes": 1, "dagger_epochs": 1, "shift": 2, "val_fraction": 0.3, "balance": "sampler"}


def tiny(out: Path, **kw) -> StudyConfig:
    args = dict(out=str(out), heads=["nac", "lstm"], seeds=2, variants={"base": TINY}, demos=3, episodes=2, seed_start=100, max_steps=60)
    return StudyConfig(**{**args, **kw})


def test_each_demonstration_noise_and_scene_records_its_own_set(tmp_path):
    quick = {**TINY, "dagger_rounds": 0}
    cfg = tiny(tmp_path / "s", heads=["gru"], seeds=1, variants={"base": quick, "dart": {**quick, "noise": 0.2}, "dr": {**quick, "scene": "domain-randomize"}},
               demos=2, episodes=1, max_steps=40, workers=1)
    run_study(cfg, quiet=True)
    clean, drifted, dr = (json.loads((tmp_path / "s" / d / "manifest.json").read_text()) for d in ("demos", "demos-noise0.2", "demos-scene-domain-randomize"))
    assert "steering_noise" not in clean and drifted["steering_noise"]["std"] == 0.2
    assert clean["env_kwargs"]["scenario"] == "clean" and dr["env_kwargs"]["scenario"] == "domain-randomize" and "steering_noise" not in dr
    assert [e["seed"] for e in drifted["episodes"]] == [e["seed"] for e in clean["episodes"]] == [0, 1]  # the same tracks
    for variant, demos in (("base", "demos"), ("dart", "demos-noise0.2"), ("dr", "demos-scene-domain-randomize")):
        train = json.loads((tmp_path / "s" / "runs" / variant / "gru/seed0/config.json").read_text())["train"]
        assert train["data"] == [str(tmp_path / "s" / demos)]
    with pytest.raises(ConfigError, match="noise .DART. drifts the steering of continuous actions"):
        tiny(tmp_path, continuous=False, variants={"dart": {**quick, "noise": 0.2}})
    with pytest.raises(ConfigError, match=r"noise must be a number in \[0, 1\]"):
        parse_variant("x:noise=2")


def test_a_folder_a_study_is_running_in_is_refused(tmp_path):
    from filelock import FileLock
    out = tmp_path / "s"
    out.mkdir()
    with FileLock(out / "study.lock"):  # as another study holds it (the lock is the operating system's: per open file, so within a process too)
        with pytest.raises(ConfigError, match=f"another study is running in {out} .*: wait for it to end or stop it"):
            run_study(tiny(out), quiet=True)
    assert not (out / "study.json").exists()  # refused before anything was written


# ---------------------------------------------------------------------- the grid, end to end
@pytest.fixture(scope="module")
def process_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "s"
    data = run_study(tiny(out, workers=2), quiet=True)
    return out, data


def test_a_tiny_study_runs_every_run_and_episode(process_study):
    out, data = process_study
    assert sorted(data["runs"]) == ["base/lstm/seed0", "base/lstm/seed1", "base/nac/seed0", "base/nac/seed1"]
    assert all(r["done"] for r in data["runs"].values())
    keys = [(e["run"], e["level"], e["episode_seed"]) for e in data["episodes"]]
    assert len(keys) == len(set(keys)) == 4 * 2 + 2  # four runs and the expert, two seeds each
    # each run is a real training run with its own seed: config.json says so
    cfg = json.loads((out / "runs/base/nac/seed1/config.json").read_text())
    assert cfg["train"]["seed"] == 1 and cfg["net"]["head"] == "nac"
    assert cfg["train"]["shift"] == 2 and cfg["train"]["val_fraction"] == 0.3  # the recipe reaches the training
    assert cfg["train"]["balance"] == "sampler"
    assert json.loads((out / "runs/base/nac/seed1/dagger.json").read_text())["rounds"][0]["seeds"] == [1_001_000]
    run = data["runs"]["base/nac/seed1"]  # what the DAgger rounds saw: their rollouts; no check in this recipe
    assert len(run["dagger_rollout_returns"]) == 1 and run["dagger_check_returns"] == [None, None] and run["dagger_selected"] is None
    # what each task cost in CPU time, for the report's sum (its episodes share an episode task's)
    assert all(r["cpu_seconds"] > 0 for r in data["runs"].values()) and all(e["cpu_seconds"] > 0 for e in data["episodes"])
    assert sum(r["cpu_seconds"] for r in data["runs"].values()) > sum(e["cpu_seconds"] for e in data["episodes"])


def test_running_again_redoes_nothing(process_study):
    out, data = process_study
    weights = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("best.safetensors")}
    again = run_study(tiny(out, workers=2), quiet=True)
    assert again["episodes"] == data["episodes"]
    assert {p: p.stat().st_mtime_ns for p in weights} == weights


def test_a_study_continues_from_study_json_alone(process_study, tmp_path):
    """Run folders are large and stay on the machine that trained them; study.json travels. A copy
    of it alone continues: finished runs are neither retrained nor re-driven (no demos, no run folder),
    and a grown grid trains only the new runs."""
    out, data = process_study
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(out / "study.json", moved / "study.json")
    again = run_study(tiny(moved, workers=2), quiet=True)
    assert again["episodes"] == data["episodes"]
    assert not (moved / "runs").exists() and not (moved / "demos").exists()
    grown = run_study(tiny(moved, workers=2, heads=["nac", "lstm", "gru"], seeds=1), quiet=True)
    assert sorted(p.parent.name + "/" + p.name for p in (moved / "runs/base").glob("*/seed*")) == ["gru/seed0"]
    assert grown["episodes"][: len(data["episodes"])] == data["episodes"]
    assert {e["run"] for e in grown["episodes"]} == {"expert", *data["runs"], "base/gru/seed0"}
    build(moved, reps=50)  # the runs asked for, not the merged grid's 3 heads x 2 seeds
    assert grown["asked"] == [*data["asked"], "base/gru/seed0"] and "Runs trained: 5 of 5;" in (moved / "report/report.md").read_text()


def test_a_variant_keeps_the_recipe_it_was_trained_with(process_study, tmp_path, monkeypatch):
    """study.json stores every field of each variant's recipe: a default changed since (here: the
    stored shift is 1 where today's recipe gives 2) is refused by name, not mixed into new runs."""
    out, data = process_study
    assert data["recipes"]["base"]["bc"]["shift"] == 2 and data["recipes"]["base"]["dagger"]["beta"] is None  # overrides and defaults, all stored
    for head, beta in (("nac", 0.5), ("lstm", 0.3)):  # None: each head's DAgger beta by the recipe (agents.training.dagger_config.recipe_beta)
        assert json.loads((out / f"runs/base/{head}/seed0/dagger.json").read_text())["rounds"][0]["beta"] == beta
    moved = tmp_path / "moved"
    moved.mkdir()
    base = data["recipes"]["base"]
    old = {**data, "recipes": {"base": {**base, "bc": {**base["bc"], "shift": 1}}}}
    (moved / "study.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match=r"variant 'base' .* was trained with shift=1 \(asked: 2\): pass those values"):
        run_study(tiny(moved, workers=2), quiet=True)
    grown = run_study(tiny(moved, workers=1, heads=["gru"], seeds=1, variants={"base": {**TINY, "shift": 1}}), quiet=True)
    assert json.loads((moved / "runs/base/gru/seed0/config.json").read_text())["train"]["shift"] == 1
    assert grown["recipes"] == old["recipes"]
    # a recipe stored before a field was added reads the value that means what it was trained with (agents.studies.recipe.ADDED_FIELDS):
    # DAgger rollouts without perturbation, where today's default is the run's own frame gaps
    # (a recipe stored so is flat: the recipe's flat names, as before it held its parts)
    flat = Recipe.flatten(data["recipes"]["base"])
    before = {**data, "recipes": {"base": {k: v for k, v in flat.items() if k != "dagger_perturb"}}}
    (moved / "study.json").write_text(json.dumps(before))
    with pytest.raises(ConfigError, match=r"variant 'base' .* was trained with dagger_perturb='none' \(asked: 'auto'\): pass those values"):
        run_study(tiny(moved, workers=2), quiet=True)
    # DAgger's check (dagger_check) changed what dagger_until judges: a stored recipe without it that used until was judged by
    # its rollouts (0), one without until continues as it is
    without = {k: v for k, v in flat.items() if k != "dagger_check"}
    (moved / "study.json").write_text(json.dumps({**data, "recipes": {"base": {**without, "dagger_until": 880.0, "dagger_max_rounds": 3}}}))
    with pytest.raises(ConfigError, match=r"variant 'base' .* was trained with dagger_until=880.0 \(asked: 0.0\), dagger_check=0 \(asked: 16\), "
                       r"dagger_max_rounds=3 \(asked: 0\)"):
        run_study(tiny(moved, workers=2), quiet=True)
    (moved / "study.json").write_text(json.dumps({**data, "recipes": {"base": without}}))
    assert store.StudyFile(tiny(moved, workers=2)).recipe("base").dagger.check == DaggerConfig.check
    # a study written before recipes were stored gets them from its overrides on the defaults of that
    # time (agents.studies.recipe.LEGACY_RECIPE), not today's: regular frame gaps for every head, where today's recipe
    # gives each head its own (None), and DAgger's beta 0.5 where today's is each head's (None); continued with those values passed, and refused by name without
    older = {k: v for k, v in data.items() if k != "recipes"}
    (moved / "study.json").write_text(json.dumps(older))
    with pytest.raises(ConfigError, match=r"variant 'base' .* was trained with stride_jitter=1 \(asked: None\), regular_share=0.0 \(asked: None\), "
                       r"dagger_beta=0.5 \(asked: None\), dagger_perturb='none' \(asked: 'auto'\)"):
        run_study(tiny(moved, workers=2), quiet=True)
    regular = {**TINY, "stride_jitter": 1, "regular_share": 0.0, "dagger_beta": 0.5, "dagger_perturb": "none"}
    assert run_study(tiny(moved, workers=2, variants={"base": regular}), quiet=True)["recipes"] == {"base": Recipe.from_flat({**flat, **regular}).to_dict()}
    (moved / "study.json").write_text(json.dumps(older))
    monkeypatch.setitem(recipe.LEGACY_RECIPE, "lr", 3e-4)
    with pytest.raises(ConfigError, match=r"variant 'base' .* was trained with lr=0.0003 \(asked: 0.0001\)"):
        run_study(tiny(moved, workers=2, variants={"base": regular}), quiet=True)


def test_a_run_that_diverges_is_reported_not_retried_and_not_driven(process_study, tmp_path, monkeypatch):
    """A run whose loss stops being finite does not stop the study: it is recorded as diverged with
    the reason, gets no episodes (its weights mean nothing), is not trained again when the study
    continues, and the report names it instead of averaging it in."""
    from agents.training import bc

    out, _ = process_study
    shutil.copytree(out / "demos", tmp_path / "s" / "demos")  # the same demonstrations: no recording
    original = bc.CarRacingTrainable.loss

    def lstm_breaks(self, model, batch, device):
        loss, figures = original(self, model, batch, device)
        return (loss * float("nan") if self.label == "lstm" else loss), figures

    monkeypatch.setattr(bc.CarRacingTrainable, "loss", lstm_breaks)
    cfg = tiny(tmp_path / "s", workers=1, seeds=1, variants={"base": {**TINY, "dagger_rounds": 0}})
    data = run_study(cfg, quiet=True)
    lstm = data["runs"]["base/lstm/seed0"]
    assert lstm["done"] and lstm["diverged"].startswith("lstm diverged: the training loss is nan at epoch 1, batch 0")
    assert not data["runs"]["base/nac/seed0"].get("diverged")
    assert sorted({e["run"] for e in data["episodes"]}) == ["base/nac/seed0", "expert"]
    monkeypatch.setattr(bc.CarRacingTrainable, "loss", original)
    state = (tmp_path / "s/runs/base/lstm/seed0").stat().st_mtime_ns
    assert run_study(cfg, quiet=True)["episodes"] == data["episodes"]  # not retrained, not driven
    assert (tmp_path / "s/runs/base/lstm/seed0").stat().st_mtime_ns == state
    build(tmp_path / "s", reps=50)
    text = (tmp_path / "s/report/report.md").read_text()
    assert "Runs that diverged (1;" in text and "- base/lstm/seed0: lstm diverged" in text
    assert "| nac | 1 x 2 |" in text and "| lstm |" not in text


def test_the_report_is_rebuilt_from_study_json_alone(process_study, tmp_path):
    out, _ = process_study
    build(out, reps=200)
    alone = tmp_path / "copy"
    alone.mkdir()
    shutil.copy(out / "study.json", alone / "study.json")
    build(alone, reps=200)
    a = json.loads((out / "report/report.json").read_text())
    b = json.loads((alone / "report/report.json").read_text())
    assert a["levels"] == b["levels"]
    text = (alone / "report/report.md").read_text()
    assert "| nac | 2 x 2 |" in text and "nac > lstm" in text
    hours = sum(r["cpu_seconds"] for r in json.loads((out / "study.json").read_text())["runs"].values()) / 3600
    assert "CPU time recorded: " in text and f"training {hours:.1f} (4 runs" in text and a["cost"]["episodes"] == 10
    assert (alone / "report/aggregates.png").stat().st_size > 1000


def test_a_study_killed_midway_continues_without_redoing(tmp_path):
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "scripts.cli", "study", "--heads", "nac", "--seeds", "2", "--demos", "3", "--episodes", "2",
           "--seed-start", "100", "--variant", "base:epochs=1,dagger_rounds=1,dagger_episodes=1,dagger_epochs=1", "--max-steps", "60",
           "--workers", "1", "--reps", "100", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    study = out / "study.json"
    deadline = time.monotonic() + seconds(300)
    while time.monotonic() < deadline:  # wait for the first finished run, then kill the whole process group
        if study.is_file() and any(r.get("done") for r in json.loads(study.read_text())["runs"].values()):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = json.loads(study.read_text())
    done = [k for k, r in before["runs"].items() if r.get("done")]
    assert done and len(done) < 2
    kept = {k: (out / "runs" / k / "best.safetensors").stat().st_mtime_ns for k in done}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = json.loads(study.read_text())
    assert all(r["done"] for r in after["runs"].values()) and len(after["runs"]) == 2
    keys = [(e["run"], e["level"], e["episode_seed"]) for e in after["episodes"]]
    assert len(keys) == len(set(keys)) == 6  # two runs and the expert, two seeds each
    assert before["episodes"] == after["episodes"][: len(before["episodes"])]  # what was recorded stays as it was
    assert {k: (out / "runs" / k / "best.safetensors").stat().st_mtime_ns for k in done} == kept


def test_the_ray_path_gives_the_same_study(process_study, tmp_path, ray_alone):
    import ray  # in the test extra

    out, data = process_study
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:  # one run of the process study's four: the same run, the same figures
        got = run_study(tiny(tmp_path / "r", ray="local", heads=["nac"], seeds=1), quiet=True)
    finally:
        ray.shutdown()
    assert sorted(got["runs"]) == ["base/nac/seed0"]
    by_key = lambda d: {(e["run"], e["level"], e["episode_seed"]): e["return"] for e in d["episodes"] if e["run"] in ("base/nac/seed0", "expert")}
    assert by_key(got) == by_key(data) and len(by_key(got)) == 4
    assert got["runs"]["base/nac/seed0"]["val_loss"] == data["runs"]["base/nac/seed0"]["val_loss"]


def test_perturbation_levels_may_drive_fewer_episodes(process_study, tmp_path):
    out, data = process_study
    grown = tmp_path / "grown"
    shutil.copytree(out, grown)
    again = run_study(tiny(grown, workers=2, episodes=2, perturb_episodes=1, levels=["none", "drop=0.5"]), quiet=True)
    perturbed = [(e["run"], e["episode_seed"]) for e in again["episodes"] if e["level"] == "drop=0.5"]
    assert sorted(perturbed) == sorted((r, 100) for r in data["runs"])  # the first held-out seed only
    assert [e for e in again["episodes"] if e["level"] == "none"] == data["episodes"]
    with pytest.raises(ConfigError, match="perturb-episodes must be in 1..episodes"):
        tiny(tmp_path / "x", perturb_episodes=3)


def test_a_finished_run_without_its_weights_and_with_episodes_to_drive_is_trained_again(process_study, tmp_path):
    out, data = process_study
    moved = tmp_path / "moved"
    moved.mkdir()
    study = json.loads((out / "study.json").read_text())
    cut = "base/lstm/seed1"
    study["episodes"] = [e for e in study["episodes"] if not (e["run"] == cut and e["episode_seed"] == 101)]
    (moved / "study.json").write_text(json.dumps(study))
    again = run_study(tiny(moved, workers=2), quiet=True)
    assert [p.parent.name + "/" + p.name for p in (moved / "runs/base").glob("*/seed*")] == ["lstm/seed1"]  # only it retrained
    keep = [e for e in data["episodes"] if e["run"] != cut]
    assert [e for e in again["episodes"] if e["run"] != cut] == keep
    assert sorted(e["episode_seed"] for e in again["episodes"] if e["run"] == cut) == [100, 101]


def test_scenario_levels_are_driven_with_the_experts_reference_and_reported_beside_the_published_scores(process_study, tmp_path):
    out, data = process_study
    grown = tmp_path / "grown"
    shutil.copytree(out, grown)
    again = run_study(tiny(grown, workers=2, perturb_episodes=1, levels=["none", "color", "color+drop=0.5"]), quiet=True)
    at = lambda level: sorted((e["run"], e["episode_seed"]) for e in again["episodes"] if e["level"] == level)
    assert at("color") == sorted([(r, s) for r in data["runs"] for s in (100, 101)] + [("expert", 100), ("expert", 101)])
    assert at("color+drop=0.5") == sorted((r, 100) for r in data["runs"])  # perturbed: the first seed only; the expert is never perturbed
    assert [e for e in again["episodes"] if e["level"] == "none"] == data["episodes"]
    clean = {e["episode_seed"]: e["return"] for e in data["episodes"] if e["run"] == "expert"}
    assert {e["episode_seed"]: e["return"] for e in again["episodes"] if e["run"] == "expert" and e["level"] == "color"} == clean  # it reads the state
    build(grown, reps=50)
    text = (grown / "report/report.md").read_text()
    assert "## Scenarios" in text and "## Scenario color, perturbation drop=0.5" in text and "AttentionAgent 866 ± 112" in text
    assert "| AttentionAgent (published) | 914 ± 15 | 866 ± 112 |" in text
    assert (grown / "report/scenarios.png").is_file()


def test_a_run_record_keeps_what_its_checks_saw_and_which_round_it_left(tmp_path, monkeypatch):
    from agents.studies import study as study_module

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"best": {"val_loss": 0.1}, "train_seconds": 5.0}))
    (run / "dagger.json").write_text("{}")  # behaviour cloning is over
    check = lambda *r: {"returns": list(r), "mean_return": sum(r) / len(r)}  # noqa: E731
    dag = {"rounds": [{"rollout_mean_return": 700.0, "check": check(900.0, 500.0)},
                      {"rollout_mean_return": 910.0, "check": {**check(920.0, 930.0), "skipped": [0, 2]}}],
           "bc_check": check(300.0, 100.0), "selected": 2}
    monkeypatch.setattr(study_module, "dagger", lambda cfg, quiet: (run / "dagger.json").write_text(json.dumps(dag)) and dag)
    job = {"path": str(run), "recipe": {}, "demos": "d", "head": "nac", "seed": 0, "max_steps": 60, "expert": "track", "continuous": True}
    out = study_module.train_run(job)
    assert out["dagger_rollout_returns"] == [700.0, 910.0] and out["dagger_selected"] == 2
    assert out["dagger_check_returns"] == [200.0, 700.0, 925.0] and out["dagger_check_worst"] == [100.0, 500.0, 920.0]
    assert out["dagger_check_skips"] == [None, None, 1]  # episodes that skipped a tile, where the check kept the counts


def test_a_run_whose_recipe_has_the_retrain_guard_is_trained_again_and_keeps_its_best_attempt(tmp_path, monkeypatch):
    """The study trains a run by the recipe's guard (agents.training.retrain): attempt 0 under the run's seed drives the
    selection tracks below the bar, attempt 1 under seed + 1000 above it; the run's record is attempt 1's, with both drives."""
    from agents.studies import study as study_module
    from agents.training import retrain

    trained = []

    def fake_train(tc):  # behaviour cloning: the run folder, its figures telling the seed
        trained.append((tc.out, tc.seed))
        Path(tc.out).mkdir(parents=True, exist_ok=True)
        (Path(tc.out) / "metrics.json").write_text(json.dumps({"best": {"val_loss": tc.seed / 1e4}, "train_seconds": 1.0}))

    def fake_dagger(cfg, quiet):  # its rounds' rollouts start at the seed's own DAgger seeds
        dag = {"rounds": [{"rollout_mean_return": float(cfg.seed_start)}]}
        (Path(cfg.run) / "dagger.json").write_text(json.dumps(dag))
        return dag

    def fake_drive(folder, episodes, seed_start, **_):
        mean = 700.0 if json.loads((folder / "metrics.json").read_text())["best"]["val_loss"] == 0.0003 else 930.0
        return {"seeds": list(range(seed_start, seed_start + episodes)), "returns": [mean] * episodes, "mean_return": mean}

    monkeypatch.setattr(study_module, "train_resumable", fake_train)
    monkeypatch.setattr(study_module, "dagger", fake_dagger)
    monkeypatch.setattr(retrain, "drive_weights", fake_drive)
    run = tmp_path / "run"
    job = {"path": str(run), "recipe": {"retrain_below": 900.0}, "demos": "d", "head": "nac", "seed": 3, "max_steps": 60,
           "expert": "track", "continuous": True}
    out = study_module.train_run(job)
    assert trained == [(str(run), 3), (str(run / "attempts" / "1"), 1003)]
    assert out["retrain_selection"] == [700.0, 930.0] and out["retrain_chosen"] == 1
    assert out["val_loss"] == 0.1003 and out["dagger_rollout_returns"] == [json.loads((run / "attempts/1/dagger.json").read_text())["rounds"][0]["rollout_mean_return"]]
    assert json.loads((run / "attempts/0/metrics.json").read_text())["best"]["val_loss"] == 0.0003
    assert "retrain_selection" not in study_module.train_run({**job, "path": str(tmp_path / "plain"), "recipe": {}})  # no guard: no drive
