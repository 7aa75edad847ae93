"""DAgger: policy rollouts labelled by the expert, added to the run's data, and training on."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from agents.training.trainers import train
from agents.training.loop import TrainConfig
from agents.carracing.state import STATE_FIELDS
from agents.carracing.seeds import CHECK_SEED, SELECT_SEED
from agents.training.dagger import dagger
from agents.training.dagger_config import DaggerConfig
from agents.training.rounds import (LOST_TILES, rollout_returns, selected_weights)
from agents.training import dagger as dagger_module
from agents.driving.policy import DrivingPolicy
from datasets.demos import DemoSet
from nac import ConfigError


def test_a_round_records_expert_labels_and_trains_on(tiny_demos, tmp_path):
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    state = dagger(DaggerConfig(run=str(run), rounds=1, episodes=2, epochs=1, workers=1, max_steps=40, beta=0.5, perturb="jitter=3"), quiet=True)
    assert len(state["rounds"]) == 1 and state["rounds"][0]["trained"] and state["rounds"][0]["beta"] == 0.5
    assert 0.3 < state["rounds"][0]["expert_share"] < 0.7  # the share of steps the expert's action was executed
    demos = DemoSet(run / "dagger")
    assert demos.seeds() == [1_000_000, 1_000_001]
    assert [e["perturb"] for e in demos.episodes] == [None, "jitter=3"]  # the policy drove the odd seed's rollout under it
    assert state["rounds"][0]["perturbed_mean_return"] == demos.episodes[1]["return"] and state["rounds"][0]["perturb"] == "jitter=3"
    clean, jittered = (e.state[:, STATE_FIELDS.index("policy_saw")] for e in sorted(demos.load(), key=lambda e: e.seed))
    assert (clean == 1).all()  # the policy saw every frame of the clean rollout
    gaps = np.diff(np.flatnonzero(jittered == 1))  # and under jitter=3 the frames 1..3 steps apart, as they came
    assert jittered[0] == 1 and set(gaps) <= {1, 2, 3} and len(set(gaps)) > 1 and set(np.unique(jittered)) == {0.0, 1.0}
    r = state["rounds"][0]
    assert rollout_returns(r) == f"{r['rollout_mean_return']:.1f} (under jitter=3: {demos.episodes[1]['return']:.1f})"  # the reports' line
    assert rollout_returns({"rollout_mean_return": 900.04}) == "900.0"  # no perturbed rollouts: the mean alone
    ep = demos.load()[0]
    assert len(ep) == 40 and set(np.unique(ep.actions)) <= set(range(5))
    cfg = json.loads((run / "config.json").read_text())
    assert str(run / "dagger") in cfg["train"]["data"]
    assert "dagger:1000000" in cfg["data"]["episodes"]  # evaluation will refuse these seeds
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["best"]["epoch"] == 2  # best chosen after the round
    # each round's weights are kept as they stood after it, behaviour cloning's as round 0
    kept = {r: load_file(str(run / "rounds" / f"r{r}.safetensors")) for r in (0, 1)}
    best = load_file(str(run / "best.safetensors"))
    assert sorted(p.name for p in (run / "rounds").iterdir()) == ["r0.safetensors", "r1.safetensors"]
    assert all(torch.equal(kept[1][k], best[k]) for k in best) and not all(torch.equal(kept[0][k], best[k]) for k in best)
    # running it again with the same rounds does nothing more; one more round adds episodes
    again = dagger(DaggerConfig(run=str(run), rounds=1, episodes=2, epochs=1, workers=1, max_steps=40), quiet=True)
    assert len(again["rounds"]) == 1 and len(DemoSet(run / "dagger").seeds()) == 2


def test_a_copied_run_trains_in_its_own_folder(tiny_demos, tmp_path):
    """A run copied elsewhere (its config naming the folder it was trained in) is trained where it is
    now, on its own rollouts; the folder it was copied from is left alone."""
    import shutil

    run, moved = tmp_path / "run", tmp_path / "elsewhere" / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    shutil.copytree(run, moved)
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    dagger(DaggerConfig(run=str(moved), rounds=1, episodes=1, epochs=1, workers=1, max_steps=30, perturb="none"), quiet=True)
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before  # the original untouched
    assert json.loads((moved / "metrics.json").read_text())["epochs"] == 2
    cfg = json.loads((moved / "config.json").read_text())["train"]
    assert cfg["out"] == str(moved) and cfg["data"] == [tiny_demos, str(moved / "dagger")]
    assert DemoSet(moved / "dagger").seeds() == [1_000_000]


def test_a_quickstart_folder_copied_whole_trains_on_its_own_demonstrations(tiny_demos, tmp_path, monkeypatch):
    """A job folder holding demonstrations and a run trained on them by paths relative to the working
    directory then (as the quick start trains), copied under another name and the original deleted,
    goes on training on the copy's demonstrations; it once stopped with 'job/demos is not a folder'."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_demos, tmp_path / "job" / "demos")
    train(TrainConfig(data=["job/demos"], out="job/run", head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    shutil.copytree(tmp_path / "job", tmp_path / "copy")
    shutil.rmtree(tmp_path / "job")
    dagger(DaggerConfig(run="copy/run", rounds=1, episodes=1, epochs=1, workers=1, max_steps=30, perturb="none"), quiet=True)
    cfg = json.loads((tmp_path / "copy" / "run" / "config.json").read_text())["train"]
    assert cfg["data"] == ["copy/demos", "copy/run/dagger"]
    assert json.loads((tmp_path / "copy" / "run" / "metrics.json").read_text())["epochs"] == 2


def test_a_moved_config_keeps_data_that_still_resolves_and_takes_its_own_along(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for d in ("kept", "new/beside", "old/beside"):
        (tmp_path / d).mkdir(parents=True)
    cfg = TrainConfig(data=["kept", "old/beside", "old/run/dagger", "gone"], out="old/run")
    moved = cfg.moved_to("new/run")
    # an outside folder that is still there stays, even where one lies beside the new run; the run's own follows it;
    # a missing one with nothing beside the new run stays as it was (training then names it)
    assert moved.out == "new/run" and moved.data == ["kept", "old/beside", "new/run/dagger", "gone"]
    (tmp_path / "old" / "beside").rmdir()
    assert cfg.moved_to("new/run").data == ["kept", "new/beside", "new/run/dagger", "gone"]
    # the run's own folder is named as the run folder is given, which dagger's own path (run / "dagger") matches: given as
    # new/../new/run it was normalised to new/run/dagger, and dagger added its rollouts a second time ("given twice")
    assert cfg.moved_to("new/../new/run").data[2] == str(Path("new/../new/run") / "dagger")


def test_an_extra_round_follows_checked_weights_below_until_and_is_marked(tiny_demos, tmp_path):
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    # 30-step episodes reach a few tiles of their track: returns above 1 (the rollout's too, so the check is driven), but every
    # check track lost by the rule (fewer than LOST_TILES of its tiles): the extra round comes, up to the cap, with its own seeds
    cfg = DaggerConfig(run=str(run), rounds=1, until=1.0, max_rounds=2, episodes=1, epochs=1, workers=1, max_steps=30, perturb="none", check=2)
    state = dagger(cfg, quiet=True)
    assert [(r["round"], r.get("extra", False), r["trained"]) for r in state["rounds"]] == [(1, False, True), (2, True, True)]
    # round 1's trained weights drove the check seeds alone (what the evaluation of the run would have given on them);
    # round 2, the cap, is not checked: nothing would follow from it
    check = state["rounds"][0]["check"]
    assert check["seeds"] == [CHECK_SEED, CHECK_SEED + 1] and "check" not in state["rounds"][1]
    assert check["mean_return"] == pytest.approx(np.mean(check["returns"])) and 0.0 <= check["finished_share"] <= 1.0
    assert len(check["tiles"]) == 2 and all(0.0 < t < LOST_TILES for t in check["tiles"]) and check["mean_return"] >= 1.0
    assert check["skipped"] == [0, 0]  # 30 steps along the start of the track skip no tile; each episode's count is kept
    assert state["rounds"][0]["clean_mean_return"] == DemoSet(run / "dagger").episodes[0]["return"]
    assert DemoSet(run / "dagger").seeds() == [1_000_000, 1_000_001]
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3
    assert len(dagger(cfg, quiet=True)["rounds"]) == 2  # again: the cap holds


def test_with_average_the_run_leaves_the_mean_of_its_last_rounds_weights_from_round_2_on(tiny_demos, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    cfg = DaggerConfig(run=str(run), rounds=2, episodes=1, epochs=1, workers=1, max_steps=30, perturb="none", average=3)
    kept = lambda r: load_file(str(run / "rounds" / f"r{r}.safetensors"))  # noqa: E731
    best = lambda: load_file(str(run / "best.safetensors"))  # noqa: E731
    same = lambda a, b: all(torch.equal(a[k], b[k]) for k in a)  # noqa: E731
    assert "average" not in dagger(cfg, quiet=True) and same(best(), kept(2))  # two rounds: round 1's are never averaged in
    state = dagger(DaggerConfig(**{**cfg.__dict__, "rounds": 3}), quiet=True)
    assert state["average"] == [2, 3] and json.loads((run / "dagger.json").read_text())["average"] == [2, 3]
    r2, r3, mean = kept(2), kept(3), best()
    floats = [k for k in mean if mean[k].is_floating_point()]
    assert floats and not same({k: r2[k] for k in floats}, r3)  # round 3 trained on
    assert all(torch.allclose(mean[k], (r2[k].double() + r3[k].double()).div(2).float()) for k in floats)
    assert all(torch.equal(mean[k], r3[k]) for k in mean if k not in floats)  # masks as they are
    assert DrivingPolicy.from_run(run, "best").select_action(np.zeros((96, 96, 3), np.uint8)) in range(5)  # they load and drive
    # a fourth round is driven by round 3's own weights (its rollouts are those of a run without averaging), then K = 2
    driven = []
    real_rollout = dagger_module.rollout
    monkeypatch.setattr(dagger_module, "rollout", lambda *a: driven.append(same(best(), r3)) or real_rollout(*a))
    state = dagger(DaggerConfig(**{**cfg.__dict__, "rounds": 4, "average": 2}), quiet=True)
    assert driven == [True]
    assert state["average"] == [3, 4] and not same(best(), kept(4))
    # continued without averaging, the run leaves its last round's own weights
    assert "average" not in dagger(DaggerConfig(**{**cfg.__dict__, "rounds": 4, "average": 1}), quiet=True) and same(best(), kept(4))
    # and a best it did not average (here: trained on, or put back, since) is left as it is
    (run / "best.safetensors").write_bytes((run / "rounds" / "r3.safetensors").read_bytes())
    dagger(DaggerConfig(**{**cfg.__dict__, "rounds": 4, "average": 1}), quiet=True)
    assert same(best(), r3)
    with pytest.raises(ConfigError, match=r"average must be a whole number in 1\.\."):
        DaggerConfig(run="x", average=0)


def test_with_select_check_the_run_leaves_the_rounds_weights_that_drove_the_check_best(tiny_demos, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    kept = lambda r: load_file(str(run / "rounds" / f"r{r}.safetensors"))  # noqa: E731
    best = lambda: load_file(str(run / "best.safetensors"))  # noqa: E731
    same = lambda a, b: all(torch.equal(a[k], b[k]) for k in a)  # noqa: E731
    means, driven = {0: 5.0, 1: 9.0, 2: 7.0}, []

    def drive(run_path, episodes, seed_start, **_):  # each round's weights as the check would find them: round 1's drive best
        assert (episodes, seed_start) == (1, CHECK_SEED)
        k = next(k for k in means if (run / "rounds" / f"r{k}.safetensors").is_file() and same(best(), kept(k)))
        driven.append(k)
        return {"seeds": [CHECK_SEED], "returns": [means[k]], "tiles": [1.0], "mean_return": means[k], "finished_share": 1.0}

    from agents.training import rounds

    monkeypatch.setattr(rounds, "drive_weights", drive)  # the loop's checks and the selection's drives
    cfg = DaggerConfig(run=str(run), rounds=2, episodes=1, epochs=1, workers=1, max_steps=30, perturb="none", select="check", check=1)
    state = dagger(cfg, quiet=True)
    assert sorted(driven) == [0, 1, 2] and state["selected"] == 1 and same(best(), kept(1)) and not same(kept(1), kept(2))
    assert state["bc_check"]["mean_return"] == 5.0 and [r["check"]["mean_return"] for r in state["rounds"]] == [9.0, 7.0]
    driven.clear()
    assert dagger(cfg, quiet=True)["selected"] == 1 and driven == [] and same(best(), kept(1))  # again: nothing driven twice
    # select last: the last round's own weights
    state = dagger(DaggerConfig(**{**cfg.__dict__, "select": "last"}), quiet=True)
    assert "selected" not in state and same(best(), kept(2))
    # a third round, selecting again: its rollouts are driven by round 2's own weights, only its own are checked, and of two
    # rounds that drove the check as well (1 and 3) the later is left
    means[3] = 9.0
    rollouts = []
    real_rollout = dagger_module.rollout
    monkeypatch.setattr(dagger_module, "rollout", lambda *a: rollouts.append(same(best(), kept(2))) or real_rollout(*a))
    state = dagger(DaggerConfig(**{**cfg.__dict__, "rounds": 3}), quiet=True)
    assert rollouts == [True] and driven == [3] and state["selected"] == 3 and same(best(), kept(3))
    assert selected_weights(state) == ("round 3's own, which drove the check seeds best "
                                       "(behaviour cloning 5.0, round 1 9.0, round 2 7.0, round 3 9.0)")
    with pytest.raises(ConfigError, match="select check needs check >= 1 episodes and average 1"):
        DaggerConfig(run="x", select="check", check=0)
    with pytest.raises(ConfigError, match="select must be one of last, check, drive"):
        DaggerConfig(run="x", select="best")


def test_with_select_drive_an_extra_round_is_kept_only_where_it_drives_the_selection_tracks_better(tiny_demos, tmp_path, monkeypatch):
    """select drive: a run without extra rounds keeps its last round's weights and drives nothing; after extra rounds, the
    recipe's last planned round and the extra ones drive the selection tracks (SELECT_SEED..) and the best is left, even
    where it is the planned round (an extra round made the run worse)."""
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    kept = lambda r: load_file(str(run / "rounds" / f"r{r}.safetensors"))  # noqa: E731
    best = lambda: load_file(str(run / "best.safetensors"))  # noqa: E731
    same = lambda a, b: all(torch.equal(a[k], b[k]) for k in a)  # noqa: E731
    selection, checks, driven = {1: 910.0, 2: 870.0, 3: 905.0}, {1: 700.0, 2: 700.0, 3: 700.0}, []

    def drive(run_path, episodes, seed_start, **_):  # the checks all fall short (another round), the selection prefers round 1
        k = next(k for k in (1, 2, 3) if (run / "rounds" / f"r{k}.safetensors").is_file() and same(best(), kept(k)))
        driven.append((k, seed_start))
        mean = selection[k] if seed_start == SELECT_SEED else checks[k]
        return {"seeds": list(range(seed_start, seed_start + episodes)), "returns": [mean] * episodes, "tiles": [1.0] * episodes,
                "skipped": [0] * episodes, "mean_return": mean, "finished_share": 1.0}

    from agents.training import rounds

    monkeypatch.setattr(rounds, "drive_weights", drive)
    monkeypatch.setattr(rounds, "rollouts_short", lambda *a: False)  # 30-step rollouts: only the checks decide
    base = dict(run=str(run), episodes=1, epochs=1, workers=1, max_steps=30, perturb="none", check=1, select="drive", select_episodes=3)
    state = dagger(DaggerConfig(**base, rounds=1, until=880.0, max_rounds=1 + 2), quiet=True)
    assert [r["round"] for r in state["rounds"]] == [1, 2, 3] and [r.get("extra", False) for r in state["rounds"]] == [False, True, True]
    # the checks after rounds 1 and 2 called the extra rounds; then rounds 1..3 drove three selection tracks each
    assert driven == [(1, CHECK_SEED), (2, CHECK_SEED), (1, SELECT_SEED), (2, SELECT_SEED), (3, SELECT_SEED)]
    assert state["selected"] == 1 and same(best(), kept(1)) and not same(kept(1), kept(3))
    assert [r["selection"]["seeds"] for r in state["rounds"]] == [[SELECT_SEED, SELECT_SEED + 1, SELECT_SEED + 2]] * 3
    assert selected_weights(state) == "round 1's own, which drove 3 selection tracks best (round 1 910.0, round 2 870.0, round 3 905.0)"
    driven.clear()
    assert dagger(DaggerConfig(**base, rounds=1, until=880.0, max_rounds=3), quiet=True)["selected"] == 1 and driven == []  # nothing twice
    # a run whose checks pass needs no extra round: its last round's weights stay, no selection track driven
    other = tmp_path / "other"
    train(TrainConfig(data=[tiny_demos], out=str(other), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    checks.update({1: 920.0})
    run = other
    state = dagger(DaggerConfig(**{**base, "run": str(other)}, rounds=1, until=880.0, max_rounds=3), quiet=True)
    assert len(state["rounds"]) == 1 and "selected" not in state and driven == [(1, CHECK_SEED)] and same(best(), kept(1))
    with pytest.raises(ConfigError, match="select drive chooses among the extra rounds: it needs until > 0"):
        DaggerConfig(run="x", select="drive")
    with pytest.raises(ConfigError, match="select episodes >= 1"):
        DaggerConfig(run="x", select="drive", until=880.0, max_rounds=4, select_episodes=0)


def test_with_check_0_an_extra_round_follows_the_rollouts(tiny_demos, tmp_path):
    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    cfg = DaggerConfig(run=str(run), rounds=1, until=10_000.0, max_rounds=2, episodes=1, epochs=1, workers=1, max_steps=30, perturb="none", check=0)
    state = dagger(cfg, quiet=True)
    assert [r["round"] for r in state["rounds"]] == [1, 2] and not any("check" in r for r in state["rounds"])


def test_dagger_needs_a_training_run(tmp_path):
    with pytest.raises(ConfigError, match="not a training run"):
        dagger(DaggerConfig(run=str(tmp_path)))
    with pytest.raises(ConfigError, match="beta must be a number in"):
        DaggerConfig(run="x", beta=1.5)
    with pytest.raises(ConfigError, match=r"off-road-steps must be a whole number in 0\.\."):
        DaggerConfig(run="x", off_road_steps=-1)
    with pytest.raises(ConfigError, match="unknown perturbation 'shake'.*; or auto"):
        DaggerConfig(run="x", perturb="shake=2")


def test_rollouts_stepped_together_are_each_the_rollout_it_would_be_alone(tiny_demos, tmp_path):
    """A round's clean rollouts go several to a task, one batched forward a step; each is recorded exactly as alone (its
    frames, labels, state rows, return and the share the expert drove), and a perturbed one is driven alone."""
    from datasets.demos import episode_filename, read_episode

    run = tmp_path / "run"
    train(TrainConfig(data=[tiny_demos], out=str(run), head="gru", window=4, epochs=1, batch_size=16, chunk=4), quiet=True)
    together, alone = tmp_path / "together", tmp_path / "alone"
    together.mkdir(), alone.mkdir()
    args = (str(run), "track", 0.5)
    seeds = (4, 6, 8)  # even: clean even with a perturbation given
    batched = dagger_module.rollout(*args, str(together), 60, 30, 5.0, "jitter=3", "clean", seeds)
    single = [dagger_module.rollout(*args, str(alone), 60, 30, 5.0, "jitter=3", "clean", (s,))[0] for s in seeds]
    assert [e["seed"] for e in batched] == list(seeds)
    for b, s in zip(batched, single):
        assert {k: v for k, v in b.items() if k != "sha256"} == {k: v for k, v in s.items() if k != "sha256"}
        x, y = (read_episode(d / episode_filename(b["seed"])) for d in (together, alone))
        for name in ("frames", "actions", "state", "rewards"):
            assert np.array_equal(getattr(x, name), getattr(y, name), equal_nan=name == "state"), name
    assert dagger_module.rollout_batches([1, 2, 3, 4, 5, 6, 7], "jitter=3", 2) == [(2, 4), (6,), (1,), (3,), (5,), (7,)]
    assert dagger_module.rollout_batches([1, 2, 3], None, 5) == [(1, 2, 3)]
