"""The PPO expert: zoo settings, a warm start that clones the track expert through PPO's own
wrappers, checkpoints and resume, and the exported expert driving like any other."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize

from agents.training.collect import CollectConfig
from agents.training.dagger_config import DaggerConfig
from agents.carracing.env import make_env
from agents.evaluation.expert_eval import ExpertEvalConfig
from agents.experts import make_expert
from agents.experts.ppo import FrameSkip, PPOTrainConfig, collect, make_ppo_env, prefit_value, train_ppo, vec_env, zoo_hyperparameters
from agents.driving.rollout import run_episode
from datasets.demos import DemoSet
from nac import ConfigError


def test_the_wrappers_and_settings_are_the_zoos():
    env = make_ppo_env(True, max_steps=20)
    obs, info = env.reset(seed=0)
    assert obs.shape == (64, 64, 1) and obs.dtype == np.uint8 and info["expert_action"].shape == (3,)
    _, _, _, _, info = env.step(np.array([0.0, 1.0, 0.0], np.float32))
    assert "expert_action" in info
    env.close()
    h = zoo_hyperparameters(True)
    assert (h["n_steps"], h["batch_size"], h["use_sde"], h["sde_sample_freq"]) == (512, 128, True, 4)


def test_frame_skip_repeats_the_action_and_sums_rewards():
    class Count:
        def __init__(self):
            self.steps = 0

        def step(self, a):
            self.steps += 1
            return self.steps, 1.0, False, False, {}

    inner = Count()
    skip = FrameSkip.__new__(FrameSkip)
    skip.env, skip.skip = inner, 2
    obs, reward, *_ = skip.step(0)
    assert obs == 2 and reward == 2.0 and inner.steps == 2


def test_the_value_prefit_fits_the_critic_alone_on_the_warm_starts_returns(tmp_path):
    """The pre-fit moves the value head only (the policy's actions and the features stay the warm start's) and
    lowers its error on the warm-started policy's own discounted returns; a run logs it before its first update."""
    cfg = PPOTrainConfig(out=str(tmp_path / "ppo"), timesteps=0, envs=1, warm_steps=32, dagger_rounds=0, bc_epochs=1,
                         eval_episodes=1, max_steps=60, value_steps=0)
    train_ppo(cfg)  # the warm start alone
    env = VecNormalize(vec_env(cfg, 1, 0), norm_obs=False, norm_reward=True)
    model = PPO.load(str(tmp_path / "ppo" / "checkpoints" / "ppo_0_steps.zip"), env=env)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    fit = prefit_value(model, 400, 3, seed=0)
    after = model.policy.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith(("mlp_extractor.value_net.", "value_net.")) for k in changed), changed
    assert fit["steps"] == 400 - 200 and fit["mse_after"] < fit["mse_before"]
    env.close()
    logged = train_ppo(PPOTrainConfig(**{**cfg.__dict__, "out": str(tmp_path / "with"), "value_steps": 300}))
    assert logged["value_prefit"]["steps"] == 100 and logged["value_prefit"]["mse_after"] < logged["value_prefit"]["mse_before"]


@pytest.mark.parametrize("anchor_epochs", [0, 1])
def test_a_short_ppo_update_after_the_value_prefit_keeps_the_warm_starts_actions(tmp_path, anchor_epochs):
    """PPO's updates from a warm start with its value pre-fitted (two rollouts of 512 steps, 10 epochs each; the linear
    schedule's learning rate is half the initial one at the first and 0 at the last). PPO alone moves the deterministic actions on
    the frames the warm start drives itself by less than `keep` per action on average (a run's first updates refine the
    warm start, they do not replace it); the warm start's own error on the expert's labels there is several times that.
    With the anchor (--anchor-epochs) the actions move towards the expert's labels on those frames."""
    keep = 0.05
    cfg = PPOTrainConfig(out=str(tmp_path / "ppo"), timesteps=1024, envs=1, warm_steps=384, dagger_rounds=0, bc_epochs=3,
                         value_steps=600, eval_every=10_000, checkpoint_every=10_000, eval_episodes=1, max_steps=120,
                         anchor_epochs=anchor_epochs)
    train_ppo(cfg)
    env = VecNormalize(vec_env(cfg, 1, 5), norm_obs=False, norm_reward=True)
    warm = PPO.load(str(tmp_path / "ppo" / "checkpoints" / "ppo_0_steps.zip"), env=env)
    updated = PPO.load(str(tmp_path / "ppo" / "checkpoints" / "ppo_1024_steps.zip"), env=env)
    assert np.allclose(warm.policy.log_std.detach().numpy(), cfg.warm_log_std)  # PPO explores from the warm start's own noise
    pi, vf = warm.policy.pi_features_extractor.state_dict(), warm.policy.vf_features_extractor.state_dict()
    assert all(torch.equal(pi[k], vf[k]) for k in pi)  # the critic's own CNN starts as the cloned one
    new_pi, new_vf = updated.policy.pi_features_extractor.state_dict(), updated.policy.vf_features_extractor.state_dict()
    assert not all(torch.equal(new_pi[k], new_vf[k]) for k in pi)  # and each trains on its own loss
    frames, labels, _ = collect(warm, env, 120, 0.0, np.random.default_rng(0), "frames")  # the warm start drives
    env.close()
    before, _ = warm.predict(frames, deterministic=True)
    after, _ = updated.predict(frames, deterministic=True)
    moved = np.abs(after - before).mean(axis=0)
    assert (moved > 0).all(), moved  # it was updated
    if anchor_epochs:
        assert np.abs(after - labels).mean() < np.abs(before - labels).mean()
    else:
        assert (moved < keep).all(), moved  # and it stayed near
        assert np.abs(before - labels).mean() > 3 * moved.mean()


def test_a_tiny_warm_started_run_checkpoints_resumes_and_exports(tmp_path, monkeypatch):
    cfg = PPOTrainConfig(out=str(tmp_path / "ppo"), timesteps=1536, envs=1, warm_steps=32, dagger_rounds=1, dagger_steps=16, value_steps=300,
                         bc_epochs=1, eval_every=10_000, checkpoint_every=10_000, max_steps=60, target_kl=0.05,
                         learning_rate=3e-4)
    updates = []  # (steps, progress left) at each PPO update; the second is interrupted
    update = PPO.train

    def recorded(self):
        updates.append((self.num_timesteps, self._current_progress_remaining))
        if len(updates) == 2:
            raise KeyboardInterrupt
        return update(self)

    monkeypatch.setattr(PPO, "train", recorded)
    with pytest.raises(KeyboardInterrupt, match="PPO interrupted at 1024 steps; --resume continues"):
        train_ppo(cfg)
    r = train_ppo(cfg, resume=True)
    n_steps = zoo_hyperparameters(True)["n_steps"]
    assert [n for n, _ in updates] == [n_steps, 2 * n_steps, 3 * n_steps] and 3 * n_steps == 1536
    # the schedule goes on where it was: progress 1 - steps / timesteps at every update, before and after the stop
    assert np.allclose([p for _, p in updates], [1 - n / 1536 for n, _ in updates])
    assert r["timesteps"] == 1536 and [w["round"] for w in r["warm"]] == [0, 1]
    run = tmp_path / "ppo"
    resumed = PPO.load(str(run / "checkpoints" / "ppo_1536_steps.zip"))
    assert resumed.target_kl == 0.05 and resumed.lr_schedule(1.0) == 3e-4  # the resumed updates kept the run's settings
    assert (run / "expert" / "policy.safetensors").is_file() and list((run / "tb").iterdir())
    assert json.loads((run / "expert" / "config.json").read_text())["use_sde"] is True
    # no evaluation in PPO beat the warm start (none ran): the export is the warm start, not the last policy
    assert r["best_eval"]["timesteps"] == 0 and np.isfinite(r["best_eval"]["mean_return"])
    exported = load_file(str(run / "expert" / "policy.safetensors"))
    warm = PPO.load(str(run / "checkpoints" / "ppo_0_steps.zip")).policy.state_dict()
    last = PPO.load(str(run / "checkpoints" / f"ppo_{r['timesteps']}_steps.zip")).policy.state_dict()
    name = "action_net.weight"
    assert torch.equal(exported[name], warm[name]) and not torch.equal(exported[name], last[name])
    with pytest.raises(ConfigError, match="not empty"):
        train_ppo(cfg)
    assert train_ppo(cfg, resume=True)["timesteps"] == 1536  # nothing left to train
    again = train_ppo(PPOTrainConfig(out=str(run), timesteps=2048), resume=True)
    assert again["timesteps"] == 2048  # a larger budget goes on from the checkpoint
    env = make_env(True, max_steps=30)
    expert = make_expert("ppo", env, run)
    result = run_episode(env, expert, seed=3)
    env.close()
    assert result.length == 30
    with pytest.raises(ConfigError, match="trained for continuous actions; drop --discrete"):
        make_expert("ppo", make_env(False, max_steps=5), run)
    # the same mistakes are caught when the command is configured, before any worker starts
    with pytest.raises(ConfigError, match="trained for continuous actions"):
        CollectConfig(out=str(tmp_path / "demos"), expert="ppo", model=str(run), continuous=False)
    assert ExpertEvalConfig(expert="ppo", model=str(run), continuous=True).model == str(run)


def test_the_learning_curve_and_the_best_are_logged_as_they_come(tmp_path, monkeypatch):
    """Every evaluation is in train_log.json when it is made, with the best so far: a run stopped after two keeps both,
    and the best its resume must beat is the best model saved, not the warm start's."""
    cfg = PPOTrainConfig(out=str(tmp_path / "ppo"), timesteps=1536, envs=1, warm_steps=32, dagger_rounds=0, value_steps=0, bc_epochs=1,
                         eval_every=512, eval_episodes=1, checkpoint_every=10_000, max_steps=60)
    update, calls = PPO.train, []

    def stopped(self):
        calls.append(self.num_timesteps)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return update(self)

    monkeypatch.setattr(PPO, "train", stopped)
    with pytest.raises(KeyboardInterrupt):
        train_ppo(cfg)
    log = json.loads((tmp_path / "ppo" / "train_log.json").read_text())
    assert [e["timesteps"] for e in log["evaluations"]] == [512, 1024]  # both evaluations before the stop
    best = log["best_eval"]  # the warm start's (timesteps 0) or a better evaluation's
    assert best["mean_return"] >= max(e["mean_return"] for e in log["evaluations"])
    assert best["timesteps"] == 0 or {"timesteps": best["timesteps"], "mean_return": best["mean_return"]} in log["evaluations"]


def test_a_folder_without_an_exported_expert_is_refused_before_any_episode(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    for bad in (tmp_path, tmp_path / "missing"):
        with pytest.raises(ConfigError, match="holds no exported PPO expert"):
            ExpertEvalConfig(expert="ppo", model=str(bad), continuous=True)
    with pytest.raises(ConfigError, match="the track expert needs no model"):
        CollectConfig(out=str(tmp_path / "d"), expert="track", model=str(tmp_path))
    with pytest.raises(ConfigError, match="unknown expert 'human'"):
        DaggerConfig(run=str(tmp_path), expert="human")


def test_with_no_model_the_shipped_expert_of_the_action_space_is_found(tmp_path, monkeypatch):
    from agents.experts import ppo_expert

    assert ppo_expert.find_export(None, True) == ppo_expert.SHIPPED_PPO[True]
    assert ppo_expert.find_export(None) == ppo_expert.SHIPPED_PPO[True]  # no space asked: the continuous one
    assert ppo_expert.find_export(None, False) == ppo_expert.SHIPPED_PPO[False]
    assert json.loads((ppo_expert.SHIPPED_PPO[False] / "config.json").read_text())["continuous"] is False
    monkeypatch.setitem(ppo_expert.SHIPPED_PPO, False, tmp_path / "none")
    with pytest.raises(ConfigError, match=r"no discrete PPO expert is shipped: train one with 'nacdrive expert train --discrete"):
        ppo_expert.find_export(None, False)


@pytest.mark.timeout(180)  # a hang (the workers' first convolution) fails here, not at the suite's limit
def test_the_shipped_ppo_expert_records_demonstrations_that_data_check_passes(tmp_path, capsys):
    """The paper's pipeline starts here: `collect --expert ppo` (the shipped expert) writes a set that `data check` passes.
    Two workers: the header's expert runs its CNN in this process before they fork (they once hung on their first
    convolution)."""
    from scripts.cli import main

    out = tmp_path / "ppo-demos"
    assert main(["collect", "--expert", "ppo", "--out", str(out), "--episodes", "2", "--max-steps", "40", "--workers", "2"]) == 0
    demos = DemoSet(out)
    assert demos.manifest["expert"]["name"] == "ppo" and demos.seeds() == [0, 1]
    ep = demos.load()[0]
    assert len(ep) == 40 and ep.actions.shape == (40, 3) and np.isfinite(ep.actions).all()
    assert np.isnan(ep.state[:, 6]).all()  # PPO plans no wheel angle: the column says so, it is not made up
    capsys.readouterr()
    assert main(["data", "check", str(out)]) == 0
    assert "2 episodes" in capsys.readouterr().out


def test_the_ppo_bench_times_the_environments_and_an_iteration_apart():
    from agents.experts.ppo import bench_ppo

    rows = bench_ppo((1,), n_steps=64, gym_steps=20)
    assert [r["name"] for r in rows][:1] == ["gymnasium CarRacing-v3"] and rows[0]["x_gymnasium"] == 1.0
    it = rows[-1]
    assert it["what"] == "PPO iteration" and it["steps"] == 64 and it["rollout_s"] > 0 and it["update_s"] > 0
    assert np.isclose(it["steps_per_s"], 64 / (it["rollout_s"] + it["update_s"]))  # the iteration is its rollout and its update
    assert np.isclose(it["x_gymnasium"], it["steps_per_s"] / rows[0]["steps_per_s"])


def test_the_anchor_clones_each_rollout_frame_on_its_own_expert_label(monkeypatch):
    """AnchoredPPO's behaviour cloning after each update pairs every frame of the rollout with the label the environment
    gave for that very frame, across automatic resets and after PPO's update has flattened its buffer: here each frame's
    pixels are a counter and its label is the counter / 255."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    import agents.experts.ppo as ppo

    class Counter(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (64, 64, 1), np.uint8)
        action_space = gym.spaces.Box(np.array([-1.0, 0.0, 0.0], np.float32), np.ones(3, np.float32))

        def __init__(self, start):
            self.value, self.t = start, 0

        def _out(self):
            self.value = (self.value + 7) % 256
            return np.full((64, 64, 1), self.value, np.uint8), {"expert_action": np.array([self.value / 255, 0, 0], np.float32)}

        def reset(self, seed=None, options=None):
            self.t = 0
            return self._out()

        def step(self, action):
            self.t += 1
            obs, info = self._out()
            return obs, 0.0, self.t == 5, False, info  # episodes of 5 steps: resets inside every rollout

    seen = []
    monkeypatch.setattr(ppo, "behaviour_clone", lambda model, obs, labels, *a: seen.append((obs.copy(), labels.copy())) or 0.0)
    model = ppo.anchored_ppo_class()("CnnPolicy", DummyVecEnv([lambda: Counter(0), lambda: Counter(100)]), n_steps=16, batch_size=16,
                                     n_epochs=1, seed=0, device="cpu")
    model.anchor_epochs = 1
    model.learn(total_timesteps=64)
    assert len(seen) == 2  # one anchor after each of the two updates
    for obs, labels in seen:
        assert obs.shape == (32, 1, 64, 64) and labels.shape == (32, 3)
        np.testing.assert_allclose(labels[:, 0] * 255, obs[:, 0, 0, 0], atol=1e-3)
        assert len(np.unique(obs[:, 0, 0, 0])) == 32  # every frame of the two environments' rollouts, none twice


def test_a_tiny_discrete_run_clones_the_discrete_expert_and_exports_a_discrete_driver(tmp_path):
    """`expert train --discrete`: the warm start fits PPO's logits to the discrete track expert's labels (cross-entropy
    falls from the uniform policy's log 5), PPO's update moves them (no gSDE), and the export drives in the discrete action space
    and only there."""
    cfg = PPOTrainConfig(out=str(tmp_path / "ppo"), continuous=False, timesteps=1024, envs=1, warm_steps=128, dagger_rounds=1,
                         dagger_steps=32, value_steps=0, bc_epochs=3, eval_every=10_000, checkpoint_every=10_000,
                         eval_episodes=1, max_steps=300)
    r = train_ppo(cfg)
    assert [w["round"] for w in r["warm"]] == [0, 1] and r["warm"][0]["bc_loss"] < np.log(5)
    assert r["timesteps"] == 1024
    run = tmp_path / "ppo"
    config = json.loads((run / "expert" / "config.json").read_text())
    assert config["use_sde"] is False
    warm, updated = (PPO.load(str(run / "checkpoints" / f"ppo_{n}_steps.zip")).policy.state_dict() for n in (0, 1024))
    # PPO's first update (at half the schedule's learning rate; the last one, at the end, at 0) moved the logits
    assert not torch.equal(warm["action_net.weight"], updated["action_net.weight"])
    env = make_env(False, max_steps=30)
    result = run_episode(env, make_expert("ppo", env, run), seed=3)
    env.close()
    assert result.length == 30
    with pytest.raises(ConfigError, match="trained for discrete actions; add --discrete"):
        make_expert("ppo", make_env(True, max_steps=5), run)


def test_the_train_command_says_how_to_drive_what_it_exported(tmp_path, capsys):
    """`nacdrive expert train` to the end (here the warm start alone, --timesteps 0), then its resume: both name the
    eval command for the run's own action space."""
    from scripts.cli import main

    out = tmp_path / "ppo"
    args = ["expert", "train", "--out", str(out), "--discrete", "--timesteps", "0", "--envs", "1", "--warm-steps", "32",
            "--dagger-rounds", "0", "--value-steps", "0", "--bc-epochs", "1", "--eval-episodes", "1", "--max-steps", "40"]
    assert main(args) == 0
    assert f"--model {out} --discrete'" in capsys.readouterr().out
    assert main(["expert", "train", "--out", str(out), "--resume", "--timesteps", "0"]) == 0  # the CLI's default is continuous
    assert f"--model {out} --discrete'" in capsys.readouterr().out
