"""The `nacdrive` command: help, one-line errors, and the benchmark end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.cli import COMMANDS, main
from tests.limits import seconds


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.cli", *args], capture_output=True, text=True, timeout=seconds(300))


def _in_process(argv, capsys) -> tuple[int, str]:
    """The exit code and stderr of `nacdrive ARGV` run by main() in this process (argparse exits, main returns):
    what a user sees, without the 3-5 s a new interpreter spends importing torch."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def _one_line_error(argv, expected, capsys):
    # a Ray client and a socket.io client keep process-wide state: those two run in their own process
    if "--ray" in argv or argv[0] == "sim":
        result = _run(*argv)
        code, err = result.returncode, result.stderr
    else:
        code, err = _in_process(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: nacdrive " + command in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["nope"], "invalid choice: 'nope'"),
        (["bench", "nac", "--bogus"], "nacdrive bench: unrecognized arguments: --bogus"),
        (["bench", "nac", "--passes", "zero"], "expected a whole number in 1..2147483647, got 'zero'"),
        (["bench", "lstm"], "invalid choice: 'lstm' (choose from 'nac', 'policy', 'bridge', 'env', 'train', 'ppo')"),
    ],
)
def test_bad_command_lines_end_with_one_line_saying_what_is_allowed(argv, expected, capsys):
    _one_line_error(argv, expected, capsys)


def test_bench_writes_a_table_and_json(tmp_path):
    out = tmp_path / "bench.json"
    result = _run("bench", "nac", "--seq-len", "64", "--passes", "1", "--max-len", "256", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "| NAC-Exact/8k |" in result.stdout and "| LSTM |" in result.stdout
    data = json.loads(out.read_text())
    models = {row["model"] for row in data["table"]}
    assert {"NAC-Exact/2k", "NAC-Exact/8k", "NAC-Exact/32k", "NAC-sqrt/8k", "NAC-PW", "MHA (torch)", "CfC", "LTC"} <= models
    assert all(row["mean_s"] > 0 and row["peak_mb"] > 0 for row in data["table"])
    assert [r["seq_len"] for r in data["scaling"] if r["model"] == "NAC-sqrt/8k"] == [256]
    from nac.bench import sqrt_recall

    # the recall it reports is sqrt selection's against exact Top-K on the same keys: all of them where keys cluster (the
    # case it is for), a share of them on random keys
    assert data["sqrt_recall"][0] == {"seq_len": 256, **sqrt_recall(256)}
    assert data["sqrt_recall"][0]["structured"] > 0.95 and data["sqrt_recall"][0]["random"] < 0.9


def test_bench_env_times_every_part_beside_gymnasiums_step(tmp_path, capsys):
    out = tmp_path / "env.json"
    assert main(["bench", "env", "--steps", "40", "--json", str(out)]) == 0
    assert "observations differing from gymnasium's: 0 of 40" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [(r["what"], r["name"]) for r in rows][:5] == [
        ("env.step", "gymnasium CarRacing-v3"), ("env.step", "FastCarRacing, renderer gymnasium"),
        ("env.step", "FastCarRacing, renderer direct"), ("observation", "gymnasium's drawing"), ("observation", "direct renderer")]
    assert [r["what"] for r in rows[5:]] == ["planned expert step", "episode", "episode"]
    assert rows[0]["x_gymnasium"] == 1.0  # the ratio's base is gymnasium's own step, measured in the same run
    assert all(r["x_gymnasium"] == pytest.approx(rows[0]["p50_ms"] / r["p50_ms"]) for r in rows[1:6])  # gymnasium steps in one
    assert all(r["steps"] == 40 and 0 < r["p50_ms"] <= r["max_ms"] for r in rows[:6])
    assert max(rows[2]["mean_abs_diff"]) < 2.0  # the direct frames are close to gymnasium's
    assert all(r["steps"] == 40 and r["episodes_per_minute"] > 0 for r in rows[6:])


def test_bench_train_measures_both_networks_with_and_without_batches_made_ahead(tiny_demos_continuous, tmp_path, capsys):
    out = tmp_path / "train.json"
    real = str(Path(__file__).parents[1] / "data" / "udacity-real")
    assert main(["bench", "train", "--heads", "gru", "--steps", "3", "--data", tiny_demos_continuous, "--recording", real,
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| carracing | cpu | prefetch 2, torch's dropout |" in printed and "x when asked" in printed
    rows = json.loads(out.read_text())
    assert [(r["task"], r["variant"]) for r in rows] == [
        ("carracing", "batches made when asked"), ("carracing", "prefetch 2"), ("carracing", "prefetch 2, torch's dropout"),
        ("udacity", "batches made when asked"), ("udacity", "prefetch 2")]
    assert all(r["steps"] == 3 and r["samples_per_s"] > 0 and 0 < r["step_p50_ms"] <= r["step_p99_ms"] for r in rows)
    assert all(0 <= r["wait_share"] < 1 and r["x_cpu"] == 1.0 for r in rows)
    assert [r["x_when_asked"] == 1.0 for r in rows] == [True, False, False, True, False]
    from agents.training.throughput import with_torch_dropout
    from nac.driving import Dropout, DrivingNet, DrivingNetConfig
    import torch

    net = DrivingNet(DrivingNetConfig(head="gru"))
    twin = with_torch_dropout(net)  # what the benchmark compares with: torch's layers, the same weights, net untouched
    kinds = lambda n: [type(m) for m in n.modules() if isinstance(m, torch.nn.Dropout)]  # noqa: E731
    assert kinds(net) == [Dropout] * 4 and kinds(twin) == [torch.nn.Dropout] * 4
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), twin.state_dict().values()))


def test_train_evaluate_and_dagger_end_to_end(tiny_demos, tmp_path):
    run = tmp_path / "run"
    r = _run("train", "--data", tiny_demos, "--out", str(run), "--head", "lstm", "--window", "4", "--epochs", "1", "--batch-size", "16", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "lstm: " in r.stdout and "best validation loss" in r.stdout
    r = _run("dagger", "--run", str(run), "--episodes", "1", "--epochs", "1", "--workers", "1", "--max-steps", "30", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "round 1: beta 0.50" in r.stdout  # a discrete run: the recipe's beta for it (agents.training.dagger_config.recipe_beta)
    lb = tmp_path / "lb.json"
    r = _run("evaluate", str(run), "--episodes", "1", "--seed-start", "700", "--workers", "1", "--max-steps", "30", "--json", str(lb))
    assert r.returncode == 0, r.stderr
    rows = json.loads(lb.read_text())
    assert [row["run"] for row in rows if not row.get("reference")] == [str(run)]
    assert "| 1 |" in r.stdout and "expert:track (discrete)" in r.stdout


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "--data", "/nonexistent", "--out", "OUT"], "/nonexistent is not a folder"),
        (["train", "--data", ".", "--out", "OUT", "--head", "transformer"], "invalid choice: 'transformer'"),
        (["train", "--data", ".", "--out", "OUT", "--lr", "-1"], "nacdrive train: argument --lr: expected a number in (0, 1e+09], got '-1'"),
        (["train", "--data", ".", "--out", "OUT", "--epochs", "two"], "argument --epochs: expected a whole number in 1..2147483647, got 'two'"),
        (["train", "--data", ".", "--out", "OUT", "--nac", "topk"], "expected KEY=VALUE, got 'topk'"),
        (["train", "--data", ".", "--out", "OUT", "--task", "udacity", "--rate-window", "2"], "--rate-window is not an option of the udacity network"),
        (["train", "--data", ".", "--out", "OUT", "--speed-output"], "--speed-output is not an option of the carracing network"),
        (["train", "--data", ".", "--out", "OUT", "--turn-weight", "2"], "it is for wheel-angle networks (--wheel-target"),
        (["train", "--data", ".", "--out", "OUT", "--wheel-target", "--turn-weight", "-2"], "argument --turn-weight: expected a number in [0, 1e+09], got '-2'"),
        (["evaluate", "/nonexistent"], "config.json not found"),
        (["dagger", "--run", "/nonexistent"], "not a training run"),
        (["quickstart", "--seed", "10"], "include the held-out seeds 10000..10009"),
        (["quickstart", "--seed", "30"], "nacdrive quickstart: seed 30 would record demonstrations on seeds 30000..30049, which include the DAgger check's seeds 30000..30015; choose another seed"),
        (["quickstart", "--regular-share", "2"], "argument --regular-share: expected a number in [0, 1], got '2'"),
        (["quickstart", "--discrete", "--discrete-target", "rates", "--rate-window", "0"], "argument --rate-window: expected a whole number in 1..2147483647, got '0'"),
        (["quickstart", "--discrete", "--rate-window", "2"], "--rate-window is for --discrete --discrete-target rates"),
        (["quickstart", "--discrete-target", "wheel"], "--discrete-target is for --discrete"),
        (["quickstart", "--turn-weight", "5"], "it is for wheel-angle networks"),
        (["quickstart", "--discrete", "--discrete-target", "rates", "--turn-weight", "5"], "it is for wheel-angle networks"),
        (["quickstart", "--discrete", "--discrete-target", "pulses"], "invalid choice: 'pulses'"),
        (["quickstart", "--dagger-rounds", "0"], "nacdrive quickstart: the DAgger rounds' rounds must be >= 1 (got 0)"),
        (["quickstart", "--dagger-beta", "1.5"], "argument --dagger-beta: expected a number in [0, 1), got '1.5'"),
        (["quickstart", "--dagger-takeover", "-1"], "argument --dagger-takeover: expected a number in [0, 1e+09], got '-1'"),
        (["quickstart", "--dagger-perturb", "shake=1"], "the DAgger rounds' unknown perturbation 'shake'"),
        (["quickstart", "--dagger-max-rounds", "2"], "the DAgger rounds' with until, max-rounds (the most rounds in all) must be more than rounds (2; got 2)"),
        (["dagger", "--run", ".", "--until", "880"], "with until, max-rounds (the most rounds in all) must be more than rounds (2; none given)"),
        (["dagger", "--run", ".", "--perturb", "jitter=0.5"], "perturbation jitter: level 0.5 is out of range (a whole number >= 1); or auto"),
        (["study"], "give --out DIR"),
        (["study", "--out", "OUT", "--variant", "x:foo=1"], "unknown recipe field 'foo'"),
        (["study", "--report", "/nonexistent"], "/nonexistent not found"),
        (["evaluate", "agents/pretrained/nac", "--ray", "127.0.0.1:1"], "cannot reach the Ray cluster"),
        (["sim", "--port", "1", "--wait", "0.5"], "no bridge answers at 127.0.0.1:1"),
        (["sim", "--wait", "0"], "argument --wait: expected a number in (0, 1e+09], got '0'"),
        (["drive", "/nonexistent", "--turn-slowdown", "1"], "argument --turn-slowdown: expected a number in [0, 1), got '1'"),
        (["evaluate", "agents/pretrained/nac", "--scenario", "fog"], "unknown scenario 'fog'; choose from clean, color, color3, bar, blob, noise, photos, domain-randomize"),
        (["study", "--out", "OUT", "--perturb", "colour+drop=0.2"], "unknown scenario or perturbation 'colour'"),
    ],
)
def test_bad_training_and_evaluation_input_is_one_line(argv, expected, capsys, tmp_path):
    # OUT: a folder of this test's own, so that no other test's files in /tmp decide the message
    _one_line_error([str(tmp_path / "x") if a == "OUT" else a for a in argv], expected, capsys)


def test_an_out_that_is_a_file_is_refused_in_one_line(capsys, tmp_path):
    (tmp_path / "x").write_text("not a run")
    _one_line_error(["train", "--data", ".", "--out", str(tmp_path / "x")], "is a file, not a folder", capsys)


def test_quickstart_runs_every_stage_and_writes_its_report(tmp_path):
    out = tmp_path / "qs"
    r = _run(
        "quickstart", "--out", str(out), "--episodes", "2", "--minutes", "0.05", "--dagger-episodes", "2",
        "--dagger-minutes", "0.05", "--eval-episodes", "1", "--workers", "1", "--max-steps", "40", "--seed", "1", "--dagger-until", "1",
        "--dagger-average", "2",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "| 1 |" in report and "expert:track (continuous)" in report and str(out / "nac") in report
    assert (out / "nac" / "best.safetensors").is_file() and (out / "nac" / "dagger" / "manifest.json").is_file()
    assert (out / "nac_seed10000.mp4").stat().st_size > 10_000 and "nac_seed10000.mp4" in report
    again = _run(
        "quickstart", "--out", str(out), "--episodes", "2", "--minutes", "0.05", "--dagger-episodes", "2",
        "--dagger-minutes", "0.05", "--eval-episodes", "1", "--workers", "1", "--max-steps", "40", "--seed", "1", "--dagger-until", "1",
        "--dagger-average", "2", "--scenario", "bar",
    )
    assert again.returncode == 0, again.stderr[-2000:]  # a finished quick start is not redone, only re-reported
    assert "In the scenario bar" in (out / "report.md").read_text()
    assert {r["scenario"] for r in json.loads((out / "leaderboard.json").read_text())} == {"clean", "bar"}
    dag = json.loads((out / "nac" / "dagger.json").read_text())
    assert dag["rounds"][0]["trained"] and dag["rounds"][0]["seeds"] == [1_001_000, 1_001_001]  # --seed 1 moves every seed
    # 40-step episodes return a few points (their rollouts' mean above --dagger-until 1) and reach a few tiles of their track:
    # after the default rounds (2) the trained weights drove the check seeds and lost every track by the rule, twice: the two
    # extra rounds it may add; the last one is not checked (nothing would follow)
    assert [(r["round"], r.get("extra", False), "check" in r) for r in dag["rounds"]] == [(1, False, False), (2, False, True), (3, True, True), (4, True, False)]
    check = dag["rounds"][1]["check"]
    assert check["seeds"] == list(range(30_000, 30_016)) and max(dag["rounds"][2]["check"]["tiles"]) < 0.95
    assert (f"each round's trained weights alone on the check seeds: round 2 {check['mean_return']:.1f} (worst {min(check['returns']):.1f}, "
            f"least tiles {min(check['tiles']):.0%}), round 3") in report
    assert dag["average"] == [3, 4] and "the policy's weights: the mean of rounds 3..4's own" in report  # --dagger-average 2
    assert [e["seed"] for e in json.loads((out / "demos" / "manifest.json").read_text())["episodes"]] == [1000, 1001]
    train = json.loads((out / "nac" / "config.json").read_text())["train"]
    assert train["seed"] == 1 and (train["stride_jitter"], train["regular_share"]) == (3, 0.5) and "gaps of 1..3 steps" in report


def test_quickstart_honours_the_retrain_guard(tmp_path):
    """--retrain-below: the trained run drives the selection tracks, falls short of an unreachable bar, is trained again
    under seed + 1000, and the report names both attempts and the one kept, which the run folder holds."""
    out = tmp_path / "qs"
    r = _run(
        "quickstart", "--out", str(out), "--episodes", "2", "--minutes", "0.05", "--dagger-rounds", "1", "--dagger-episodes", "1",
        "--dagger-minutes", "0.05", "--dagger-until", "0", "--eval-episodes", "1", "--workers", "1", "--max-steps", "30",
        "--retrain-below", "100000", "--retrain-attempts", "2", "--retrain-episodes", "1",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((out / "nac" / "retrain.json").read_text())
    assert [a["seed"] for a in state["attempts"]] == [0, 1000] and [a["selection"]["seeds"] for a in state["attempts"]] == [[20000]] * 2
    kept = state["chosen"]
    assert json.loads((out / "nac" / "config.json").read_text())["train"]["seed"] == [0, 1000][kept]
    assert "retrain: attempt 2 of at most 2, training seed 1000" in r.stdout
    report = (out / "report.md").read_text()
    assert "- retrained: 2 attempts on 1 selection track (retrain below 100000): attempt 1 (seed 0) " in report
    assert f"kept attempt {kept + 1}" in report


def test_the_quickstart_recipe_depends_on_the_action_space():
    """Continuous: 50 demonstrations, 1 epoch and 1 after each DAgger round at Adam 3e-4, and the mix
    of frame gaps for every head (one rule, so that heads compared are trained alike); discrete: 30, 6, 2
    at 1e-4, regular. What the user gives wins."""
    from agents.quickstart import QuickstartConfig

    def recipe(episodes=None, **kw):
        q = QuickstartConfig(episodes=episodes, **kw)
        t = q.train_config("d", "r")
        return q.episodes, t.epochs, q.dagger_config("r").epochs, t.lr, t.stride_jitter, t.regular_share

    assert recipe() == recipe(head="cfc") == (50, 1, 1, 3e-4, 3, 0.5)
    assert recipe(head="lstm") == recipe(head="mha") == (50, 1, 1, 3e-4, 3, 0.5)
    assert recipe(discrete=True) == recipe(discrete=True, head="lstm") == (30, 6, 2, 1e-4, 1, 0.0)
    assert recipe(20, recipe={"epochs": 2, "lr": 1e-4, "stride_jitter": 1}) == (20, 2, 1, 1e-4, 1, 0.5)
    assert recipe(head="gru", recipe={"dagger_epochs": 3, "stride_jitter": 2, "regular_share": 0.25}) == (50, 1, 3, 3e-4, 2, 0.25)
    t = QuickstartConfig(seed=2).train_config("d", "r")
    assert t.seed == 2 and t.net == {"use_time": True}  # continuous actions: the wheel target is for discrete ones
    # validation holds out a fifth of the demonstrations unless told otherwise
    assert (t.val_fraction, QuickstartConfig(discrete=True, recipe={"val_fraction": 0.04}).train_config("d", "r").val_fraction) == (0.2, 0.04)
    # the quick start's recipe is its preset's, resolved, and kept so in quickstart.json
    from agents.training.recipe import preset_recipe

    assert QuickstartConfig(recipe={"lr": 1e-3}).recipe == preset_recipe("quickstart", {"lr": 1e-3}).to_dict()


def test_the_discrete_quickstart_learns_the_wheel_angle_unless_told_otherwise():
    from agents.quickstart import QuickstartConfig
    from nac.config import ConfigError

    net = lambda **kw: QuickstartConfig(discrete=True, **kw).train_config("d", "r").net  # noqa: E731
    assert net() == {"use_time": True, "wheel_target": True, "wheel_speed": "target"}
    # the wheel target's excess is weighted by brake / no brake; the other targets keep the default (auto)
    assert QuickstartConfig(discrete=True).train_config("d", "r").balance == "weights"
    assert QuickstartConfig(discrete=True, discrete_target="rates").train_config("d", "r").balance == "auto"
    assert QuickstartConfig().train_config("d", "r").balance == "auto"
    assert net(discrete_target="rates") == {"use_time": True, "rate_window": 4}
    assert net(discrete_target="rates", rate_window=2) == {"use_time": True, "rate_window": 2}
    assert net(discrete_target="actions") == {"use_time": True}
    assert QuickstartConfig(discrete_target="wheel").train_config("d", "r").net == {"use_time": True}  # discrete only
    # DAgger's beta: the continuous quick start's 0.3 for every head (NAC's full recipe has 0.5), 0.5 for the discrete wheel
    # recipe (agents.training.dagger_config.recipe_beta), and what the user says
    assert QuickstartConfig().dagger_config("r").beta == 0.3 and QuickstartConfig(discrete=True).dagger_config("r").beta == 0.5
    assert QuickstartConfig(head="lstm").dagger_config("r").beta == 0.3
    assert QuickstartConfig(discrete=True, recipe={"dagger_beta": 0.2}).dagger_config("r").beta == 0.2
    # one more DAgger round while the last round's rollouts or its trained weights on 16 check episodes average below 880 or
    # lose a track, up to the rounds asked for + 2 (discrete: + 1)
    d = QuickstartConfig(discrete=True).dagger_config("r")
    assert (d.rounds, d.until, d.max_rounds, d.check) == (2, 880.0, 3, 16) and QuickstartConfig(recipe={"dagger_check": 0}).dagger_config("r").check == 0
    assert QuickstartConfig().dagger_config("r").max_rounds == 4 and QuickstartConfig(discrete=True, recipe={"dagger_rounds": 3}).dagger_config("r").max_rounds == 4
    # the discrete policy's weights: the mean of the last three rounds' from round 2 on; the continuous one's, its last round's
    assert (d.average, QuickstartConfig().dagger_config("r").average, QuickstartConfig(discrete=True, recipe={"dagger_average": 1}).dagger_config("r").average) == (3, 1, 1)
    assert (QuickstartConfig(recipe={"dagger_rounds": 4}).dagger_config("r").max_rounds, QuickstartConfig(recipe={"dagger_until": 0}).dagger_config("r").until) == (6, 0.0)
    # DAgger's perturbed rollouts: the run's own frame gaps unless the user says
    assert QuickstartConfig().dagger_config("r").perturb == "auto" and QuickstartConfig(recipe={"dagger_perturb": "none"}).dagger_config("r").perturb == "none"
    with pytest.raises(ConfigError, match="discrete_target must be one of wheel, rates, actions"):
        QuickstartConfig(discrete=True, discrete_target="pulses")


def test_evaluate_under_perturbations_gives_one_board_per_level_and_a_plot(tiny_demos, tmp_path, capsys):
    run = tmp_path / "run"
    assert _run("train", "--data", tiny_demos, "--out", str(run), "--head", "nac", "--window", "4", "--epochs", "1", "--quiet").returncode == 0
    lb = tmp_path / "robust.json"
    r = _run("evaluate", str(run), "--episodes", "2", "--seed-start", "700", "--workers", "1", "--max-steps", "20",
             "--perturb", "none", "--perturb", "drop=0.5", "--json", str(lb))
    assert r.returncode == 0, r.stderr
    rows = json.loads(lb.read_text())
    assert sorted(row["perturbation"] for row in rows if not row.get("reference")) == ["drop=0.5", "none"]
    assert r.stdout.count("Leaderboard, tracks 700..701") == 2  # named: neither the validation nor the test range
    assert (tmp_path / "robust.png").stat().st_size > 5000
    _one_line_error(["evaluate", str(run), "--perturb", "teleport=1"], "unknown perturbation 'teleport'", capsys)


def test_a_run_trained_twice_on_one_device_is_its_own_twin(tiny_demos_continuous):
    """bench train's check of a GPU against the CPU, run here on the CPU twice: the loop is deterministic on one
    device, so the difference it reports is exactly 0 (a difference on a GPU is then the device's arithmetic)."""
    from agents.training.throughput import twins

    twin = twins(tiny_demos_continuous, "gru", steps=4, on=("cpu", "cpu"))
    assert twin == {"devices": ["cpu", "cpu"], "steps": 4, "param_rel_diff": 0.0, "loss_rel_diff": 0.0}


def test_every_command_that_drives_is_continuous_by_default_and_takes_the_old_switch_as_said(capsys):
    """collect, expert eval and record drive continuous actions unless --discrete, as quickstart, study and the
    shipped policies; the switch of before, --continuous, still says the default; with --discrete it is one line."""
    from agents.evaluation.expert_eval import ExpertEvalConfig
    from agents.figures.video import RecordConfig
    from agents.training.collect import CollectConfig
    from scripts.cli import build_parser

    assert CollectConfig(out="x").continuous and ExpertEvalConfig().continuous and RecordConfig(out="x.mp4").continuous
    for argv in (["collect", "--out", "x"], ["expert", "eval"], ["record", "run", "--out", "x.mp4"], ["study"]):
        parse = build_parser().parse_args
        assert parse(argv).continuous and parse([*argv, "--continuous"]).continuous and not parse([*argv, "--discrete"]).continuous
        with pytest.raises(SystemExit) as e:
            main([*argv, "--discrete", "--continuous"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and "not allowed with argument --discrete" in err[0], err


def test_train_on_discrete_demonstrations_says_in_one_line_what_it_trains(tiny_demos, tmp_path, capsys):
    from scripts.train import discrete_note, train_config
    from scripts.cli import build_parser

    args = lambda *more: build_parser().parse_args(["train", "--data", tiny_demos, "--out", str(tmp_path / "r"), *more])  # noqa: E731
    note = discrete_note(train_config(args()))
    assert note and "--wheel-target --wheel-speed target --balance weights" in note
    assert discrete_note(train_config(args("--wheel-target", "--wheel-speed", "target"))) is None  # the discrete recipe's network


def test_record_explain_and_expert_eval_end_to_end(tmp_path, capsys):
    """The three commands a user runs on a shipped policy and an expert, as the README gives them, at a small scale."""
    import imageio.v3 as iio

    nac = str(Path(__file__).parents[2] / "agents" / "pretrained" / "nac")
    assert main(["record", nac, "--max-steps", "12", "--out", str(tmp_path / "drive.mp4")]) == 0
    frames = iio.imread(tmp_path / "drive.mp4")
    assert len(frames) >= 12 and frames.shape[-1] == 3
    assert main(["explain", nac, "--max-steps", "30", "--saliency-frames", "2", "--out", str(tmp_path / "why")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "why").glob("*.png"))
    assert pngs and (tmp_path / "why" / "explain.md").is_file() and all(name in (tmp_path / "why" / "explain.md").read_text() for name in pngs)
    capsys.readouterr()
    assert main(["expert", "eval", "--episodes", "2", "--max-steps", "30", "--workers", "1", "--json", str(tmp_path / "e.json")]) == 0
    printed = capsys.readouterr().out
    rows = json.loads((tmp_path / "e.json").read_text())
    assert "continuous" in printed and len(rows["returns"]) == 2 and all(r > 0 for r in rows["returns"])


def test_the_discrete_quickstart_runs_every_stage_end_to_end(tmp_path):
    """`quickstart --discrete`, the README's other headline command, at a small scale: the planning discrete expert's
    demonstrations, a wheel-angle network, DAgger rounds whose weights are averaged, a report of a discrete policy."""
    out = tmp_path / "qsd"
    r = _run(
        "quickstart", "--discrete", "--out", str(out), "--episodes", "2", "--minutes", "0.05", "--dagger-episodes", "2",
        "--dagger-minutes", "0.05", "--eval-episodes", "1", "--workers", "1", "--max-steps", "40", "--dagger-until", "0",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "expert:track (discrete)" in report and "| 1 |" in report and (out / "nac_seed10000.mp4").stat().st_size > 10_000
    manifest = json.loads((out / "demos" / "manifest.json").read_text())
    assert manifest["action_space"] == "discrete" and len(manifest["episodes"]) == 2
    net = json.loads((out / "nac" / "config.json").read_text())["net"]
    assert net["action_space"] == "discrete" and net["wheel_target"] and net["wheel_speed"] == "target"
    dag = json.loads((out / "nac" / "dagger.json").read_text())
    assert [r["round"] for r in dag["rounds"]] == [1, 2] and all(r["trained"] for r in dag["rounds"])
