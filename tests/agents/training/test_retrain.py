"""The retrain guard: a finished run that drives its selection tracks below the recipe's bar is trained again under another
seed, and the run folder becomes the attempt that drove them best; every step resumable."""

import json

import pytest

from agents.carracing.seeds import SELECT_SEED
from agents.training import retrain
from agents.training.retrain import ATTEMPT_SEED_STEP, RetrainRecipe, read_state, retrain_summary, train_attempts
from nac import ConfigError


@pytest.fixture
def fake(monkeypatch):
    """train_once writes a run folder whose weights are its seed; a drive of the selection tracks returns the mean given
    for that seed. Records what was trained and driven."""
    means: dict[int, float] = {}
    trained, driven = [], []

    def train_once(folder, seed):
        trained.append(seed)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "best.safetensors").write_text(str(seed))
        (folder / "rounds").mkdir(exist_ok=True)
        (folder / "rounds" / "r1.safetensors").write_text(str(seed))

    def drive(folder, episodes, seed_start, **_):
        seed = int((folder / "best.safetensors").read_text())
        driven.append((seed, episodes, seed_start))
        return {"seeds": list(range(seed_start, seed_start + episodes)), "returns": [means[seed]] * episodes, "mean_return": means[seed]}

    monkeypatch.setattr(retrain, "drive_weights", drive)
    return means, trained, driven, train_once


def test_without_the_guard_the_run_is_trained_once_and_nothing_is_driven(tmp_path, fake):
    means, trained, driven, train_once = fake
    assert train_attempts(RetrainRecipe(), tmp_path / "run", 3, train_once, max_steps=100) is None
    assert trained == [3] and driven == [] and read_state(tmp_path / "run") is None


def test_a_good_first_attempt_is_kept_without_another(tmp_path, fake):
    means, trained, driven, train_once = fake
    means[0] = 910.0
    state = train_attempts(RetrainRecipe(below=900.0, episodes=5), tmp_path / "run", 0, train_once, max_steps=100)
    assert trained == [0] and driven == [(0, 5, SELECT_SEED)] and state["chosen"] == 0
    assert not (tmp_path / "run" / "attempts").exists()


def test_a_weak_run_is_trained_again_and_the_folder_becomes_the_best_attempt(tmp_path, fake):
    means, trained, driven, train_once = fake
    run = tmp_path / "run"
    means.update({2: 700.0, 2 + ATTEMPT_SEED_STEP: 920.0})
    state = train_attempts(RetrainRecipe(below=900.0, attempts=3, episodes=4), run, 2, train_once, max_steps=100)
    assert trained == [2, 1002] and [d[0] for d in driven] == [2, 1002]  # the second attempt reached the bar: no third
    assert state["chosen"] == 1 and [a["seed"] for a in state["attempts"]] == [2, 1002]
    assert (run / "best.safetensors").read_text() == "1002" and (run / "rounds" / "r1.safetensors").read_text() == "1002"
    assert (run / "attempts" / "0" / "best.safetensors").read_text() == "2"  # attempt 0 kept aside, whole
    assert (run / "attempts" / "1" / "best.safetensors").read_text() == "1002"
    assert json.loads((run / "retrain.json").read_text()) == state
    assert retrain_summary(state) == ("2 attempts on 4 selection tracks (retrain below 900): attempt 1 (seed 2) 700.0, "
                                      "attempt 2 (seed 1002) 920.0; kept attempt 2")
    trained.clear(), driven.clear()
    assert train_attempts(RetrainRecipe(below=900.0, attempts=3, episodes=4), run, 2, train_once, max_steps=100) == state
    assert trained == [] and driven == [] and (run / "best.safetensors").read_text() == "1002"  # again: nothing redone


def test_when_every_attempt_falls_short_the_best_is_kept_and_an_earlier_wins_a_tie(tmp_path, fake):
    means, trained, driven, train_once = fake
    run = tmp_path / "run"
    means.update({0: 700.0, 1000: 800.0, 2000: 800.0})
    state = train_attempts(RetrainRecipe(below=900.0, attempts=3), run, 0, train_once, max_steps=100)
    assert trained == [0, 1000, 2000] and state["chosen"] == 1 and (run / "best.safetensors").read_text() == "1000"


def test_a_stop_loses_only_the_attempt_under_way(tmp_path, fake):
    means, trained, driven, train_once = fake
    run = tmp_path / "run"
    means.update({0: 700.0, 1000: 950.0})

    def stopped(folder, seed):
        if seed == 1000:
            raise KeyboardInterrupt
        train_once(folder, seed)

    with pytest.raises(KeyboardInterrupt):
        train_attempts(RetrainRecipe(below=900.0), run, 0, stopped, max_steps=100)
    assert [a["seed"] for a in read_state(run)["attempts"]] == [0] and "chosen" not in read_state(run)
    trained.clear(), driven.clear()
    state = train_attempts(RetrainRecipe(below=900.0), run, 0, train_once, max_steps=100)
    assert trained == [1000] and [d[0] for d in driven] == [1000] and state["chosen"] == 1


def test_placing_the_chosen_attempt_finishes_after_a_stop(tmp_path, fake):
    means, trained, driven, train_once = fake
    run = tmp_path / "run"
    means.update({0: 700.0, 1000: 950.0})
    state = train_attempts(RetrainRecipe(below=900.0), run, 0, train_once, max_steps=100)
    (run / "best.safetensors").unlink()  # as if a stop cut the copy short
    state.pop("placed")
    (run / "retrain.json").write_text(json.dumps(state))
    train_attempts(RetrainRecipe(below=900.0), run, 0, train_once, max_steps=100)
    assert (run / "best.safetensors").read_text() == "1000" and (run / "attempts" / "0" / "best.safetensors").read_text() == "0"
    assert read_state(run)["placed"] and trained == [0, 1000]


def test_bad_fields_are_named():
    with pytest.raises(ConfigError, match=r"below must be a number in \[0, "):
        RetrainRecipe(below=-1.0)
    with pytest.raises(ConfigError, match=r"attempts \(the most in all, with below\) must be >= 2"):
        RetrainRecipe(below=900.0, attempts=1)
    with pytest.raises(ConfigError, match=r"episodes must be a whole number in 1\.\."):
        RetrainRecipe(episodes=0)


def test_the_guard_drives_a_real_run_on_the_selection_tracks(tiny_demos, tmp_path):
    """Without fakes: a tiny run trained by train_once, its weights driving one 20-step selection track."""
    from agents.training.loop import TrainConfig
    from agents.training.trainers import train

    def train_once(folder, seed):
        if not (folder / "best.safetensors").is_file():
            train(TrainConfig(data=[tiny_demos], out=str(folder), head="gru", window=4, epochs=1, batch_size=16, chunk=4, seed=seed), quiet=True)

    run = tmp_path / "run"
    state = train_attempts(RetrainRecipe(below=1e6, attempts=2, episodes=1), run, 0, train_once, max_steps=20)
    assert [a["seed"] for a in state["attempts"]] == [0, ATTEMPT_SEED_STEP]
    assert all(a["selection"]["seeds"] == [SELECT_SEED] and len(a["selection"]["returns"]) == 1 for a in state["attempts"])
    chosen, second = state["chosen"], (run / "attempts" / "1" / "best.safetensors").read_bytes()
    assert (run / "attempts" / "0" / "config.json").is_file() == (chosen == 1)  # attempt 0 moved aside only if not kept
    assert ((run / "best.safetensors").read_bytes() == second) == (chosen == 1) and (run / "config.json").is_file()
