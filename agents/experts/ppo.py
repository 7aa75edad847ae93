"""The PPO expert: stable-baselines3 PPO on CarRacing-v3 with rl-baselines3-zoo's settings, an
optional warm start from the track expert (behaviour cloning of PPO's own policy network through
PPO's own observation wrappers, then DAgger rounds), and the trained expert exported as
safetensors + JSON (agents.experts.ppo_expert drives it like any other expert).

The zoo's pipeline: frame skip 2, 64x64, grayscale, 2 stacked frames, 8 environments, CnnPolicy,
learning rate linear from 1e-4, n_steps 512, batch 128, 10 epochs, gSDE (continuous), reward
normalisation. From scratch it needs about 4M steps, hence the warm start; `nacdrive bench ppo`
(bench_ppo) says what a step costs, as a ratio to gymnasium's step.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers import GrayscaleObservation, ResizeObservation
from safetensors.torch import save_model
from torch import nn
from tqdm import tqdm

from agents.carracing.env import CONTINUOUS, EPISODE_STEPS, FAST_ID
from agents.experts.ppo_expert import PPO_EXPORT, SIZE, SKIP, STACK, policy_kwargs
from nac.checkpoint import holds_anything, read_json, write_json
from nac.config import ConfigError, SIGNED, above, at_least, check_ranges, need

def zoo_hyperparameters(continuous: bool) -> dict[str, Any]:
    """rl-baselines3-zoo's PPO settings for CarRacing (hyperparams/ppo.yml)."""
    return {
        "n_steps": 512, "batch_size": 128, "gamma": 0.99, "gae_lambda": 0.95, "n_epochs": 10, "ent_coef": 0.0,
        "max_grad_norm": 0.5, "vf_coef": 0.5, "clip_range": 0.2, "use_sde": continuous, "sde_sample_freq": 4 if continuous else -1,
        "policy_kwargs": {"log_std_init": -2.0, "ortho_init": False, "activation_fn": "GELU", "net_arch": {"pi": [256], "vf": [256]}},
    }


class FrameSkip(gym.Wrapper):
    """Repeat each action `skip` times and sum the rewards (the zoo's FrameSkip; gymnasium's
    MaxAndSkipObservation also max-pools the frames, which the zoo's pipeline does not)."""

    def __init__(self, env: gym.Env, skip: int = SKIP) -> None:
        super().__init__(env)
        self.skip = skip

    def step(self, action: Any) -> Any:
        total, obs, term, trunc, info = 0.0, None, False, False, {}
        for _ in range(self.skip):
            obs, reward, term, trunc, info = self.env.step(action)
            total += float(reward)
            if term or trunc:
                break
        return obs, total, term, trunc, info


class ExpertLabel(gym.Wrapper):
    """Puts the track expert's action for the new state into info["expert_action"] (for
    behaviour cloning and DAgger inside vectorised environments, where the expert must run next
    to its simulator)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        from agents.experts.track import TrackFollowingExpert

        self.expert = TrackFollowingExpert(env)

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.expert.reset()
        return obs, {**info, "expert_action": self.expert.select_action()}

    def step(self, action: Any) -> Any:
        obs, reward, term, trunc, info = self.env.step(action)
        return obs, reward, term, trunc, {**info, "expert_action": self.expert.select_action()}


def make_ppo_env(continuous: bool, max_steps: int = EPISODE_STEPS, labels: bool = True) -> gym.Env:
    env: gym.Env = gym.make(FAST_ID, continuous=continuous, max_episode_steps=max_steps)
    if labels:
        env = ExpertLabel(env)
    env = FrameSkip(env, SKIP)
    env = ResizeObservation(env, (SIZE, SIZE))
    return GrayscaleObservation(env, keep_dim=True)


@dataclass
class PPOTrainConfig:
    out: str  # the run folder
    continuous: bool = field(default=True, metadata={**CONTINUOUS, "negated_help": "5 discrete actions (no gSDE) instead of "
                                                                                   "continuous"})  # continuous actions
    # (gSDE needs them; the zoo trains continuous)
    timesteps: int = 200_000  # PPO environment steps (after frame skip) of the run in all, warm start excluded: --resume trains
    # what is left of them, on the same learning-rate schedule (give more to go on further)
    envs: int = field(default=8, metadata=at_least(1))  # SubprocVecEnv workers (the zoo's 8)
    warm_start: str = field(default="track", metadata={"choices": ("track", "none")})  # track: behaviour-clone the track expert
    # (and DAgger rounds) before PPO, so that PPO starts from a driver; none: from scratch
    warm_steps: int = field(default=20_000, metadata=at_least(1))  # expert-driven steps recorded for cloning
    dagger_rounds: int = 6  # DAgger rounds before PPO (two left spin-outs: 2 of 50 tracks below 600; six none, on the
    # validation and the test tracks; docs/studies/ppo-expert/)
    dagger_steps: int = field(default=10_000, metadata=at_least(1))  # policy-driven steps per DAgger round
    bc_epochs: int = field(default=5, metadata=at_least(1))  # passes over the aggregated data per round
    value_steps: int = 8192  # with a warm start: steps the warm-started policy drives (sampled, as PPO's rollouts) to
    # pre-fit PPO's value function on its own discounted returns before the first update (0: no pre-fit)
    value_epochs: int = field(default=5, metadata=at_least(1))  # passes of the value pre-fit over those steps
    shared_features: bool = False  # the critic on the policy's own CNN, as the zoo has it. Apart (the default), the critic
    # has its own copy, the warm start's once the cloning is done, and the value loss cannot move the features the actions
    # read: shared, a warm-started run's CNN moved 3-13 % in 20 000 steps and most of its actions' change came through it
    # (docs/studies/ppo-expert/)
    warm_log_std: float = field(default=-3.5, metadata=SIGNED)  # continuous, with a warm start: gSDE's exploration log std once the cloning is done, before
    # the value pre-fit and PPO's rollouts. At the zoo's -2.0 the warm start's sampled driving crashed (206 mean on held-out
    # seeds 30000..30005 against 924 deterministic; -3.0: 882, -4.0: 924), so PPO learnt from a policy that was not the
    # warm start's and undid it (921.8 -> 358.4 at its first evaluation, 20 000 steps)
    learning_rate: float = field(default=1e-4, metadata=above(0))  # PPO's learning rate at the start, decaying linearly to 0 at --timesteps (the zoo's 1e-4).
    # From a warm start one Adam step of PPO's loss at 1e-4 moved the policy by an approximate KL of 1.58 on a rollout of
    # its own, at 1e-5 0.020, at 3e-6 0.0019 (ten steps: 3.76, 0.038, 0.0095; docs/studies/ppo-expert/)
    target_kl: float | None = field(default=None, metadata=above(0))  # stop an update's epochs once its approximate KL from the rollout's policy passes 1.5x this
    # (SB3's target_kl; unset: the zoo's 10 epochs whatever the KL). From a warm start gSDE's noise is small (log std
    # -3.5), so a small change of the mean is a large KL: the updates of a run without it reached an approximate KL of
    # 8-13 with 87-96 % of the samples clipped in its first 20 000 steps (docs/studies/ppo-expert/)
    anchor_epochs: int = 0  # after each PPO update, passes of behaviour cloning over that update's own rollout, every
    # frame labelled by the track expert (DAgger on the states PPO visits, an anchor to the expert that the policy gradient
    # lacks); 0: PPO alone. One pass at the zoo's learning rate did not hold a warm start (920.0 -> 51.0 at 20 000 steps, PPO
    # alone 773.7; docs/studies/ppo-expert/)
    eval_every: int = field(default=20_000, metadata=at_least(1))  # steps between evaluations on held-out seeds
    eval_episodes: int = field(default=5, metadata=at_least(1))  # episodes per evaluation
    eval_seed: int = 30_000  # the eval callback's first held-out seed
    checkpoint_every: int = field(default=20_000, metadata=at_least(1))  # steps between checkpoints
    seed: int = 0  # PPO's seed
    device: str = "cpu"  # SB3's CnnPolicy on 64x64 frames trains about as fast on CPU
    max_steps: int = EPISODE_STEPS  # steps per episode

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.warm_start is None:  # runs saved before the option was text
            self.warm_start = "none"
        need(self.warm_start in ("track", "none"), f"warm start must be track or none (got {self.warm_start!r})")


def run_policy_kwargs(continuous: bool, shared_features: bool) -> dict[str, Any]:
    """The policy's kwargs as JSON (the export's config.json keeps them): the zoo's, the features shared or not."""
    return {**zoo_hyperparameters(continuous)["policy_kwargs"], "share_features_extractor": shared_features}


def vec_env(cfg: PPOTrainConfig, n: int, seed: int) -> Any:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack

    venv = make_vec_env(
        partial(make_ppo_env, cfg.continuous, cfg.max_steps), n_envs=n, seed=seed,
        vec_env_cls=SubprocVecEnv if n > 1 else DummyVecEnv,
    )
    return VecFrameStack(venv, STACK)


def _reset_labels(venv: Any) -> np.ndarray:
    """The expert's action for each environment's observation just after a reset (the innermost VecEnv keeps the reset
    infos; the wrappers do not pass them on)."""
    base = venv.unwrapped
    return _labels(base.reset_infos, base.reset_infos, np.ones(base.num_envs, bool))


def _labels(infos: list[dict], reset_infos: list[dict], dones: np.ndarray) -> np.ndarray:
    """The expert's action for each environment's current observation (after an automatic
    reset, the reset's label)."""
    return np.stack([np.asarray((reset_infos[i] if dones[i] else infos[i])["expert_action"], dtype=np.float32) for i in range(len(infos))])


def collect(model: Any, venv: Any, steps: int, beta: float, rng: np.random.Generator, desc: str) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Drive `steps` transitions executing the expert's action with probability beta (else the
    policy's), recording every observation with the expert's label; finished episode returns."""
    obs = venv.reset()
    base = venv.unwrapped  # the innermost VecEnv keeps the reset infos (the wrappers do not pass them on)
    labels = _reset_labels(venv)
    xs, ys, returns, running = [], [], [], np.zeros(venv.num_envs)
    for _ in tqdm(range(max(1, steps // venv.num_envs)), desc=desc, unit="step", leave=False):
        xs.append(obs.copy())
        ys.append(labels)
        act = labels.copy()
        if beta < 1.0:
            pol, _ = model.predict(obs, deterministic=True)
            use_policy = rng.random(venv.num_envs) >= beta
            act[use_policy] = np.asarray(pol, dtype=np.float32).reshape(act.shape)[use_policy]
        if not model.policy.squash_output and isinstance(model.action_space, gym.spaces.Box):
            act = np.clip(act, model.action_space.low, model.action_space.high)
        obs, rewards, dones, infos = venv.step(act if isinstance(model.action_space, gym.spaces.Box) else act.astype(np.int64))
        running += rewards
        for i in np.flatnonzero(dones):
            returns.append(float(running[i]))
            running[i] = 0.0
        labels = _labels(infos, base.reset_infos, dones)
    return np.concatenate(xs), np.concatenate(ys), returns


def behaviour_clone(model: Any, obs: np.ndarray, labels: np.ndarray, epochs: int, seed: int, opt: torch.optim.Optimizer | None = None) -> float:
    """Fit PPO's own policy network to the expert's labels: the mean action (continuous, MSE)
    or the action logits (discrete, cross-entropy), by `opt` (a fresh Adam at 3e-4 if None).
    Returns the last epoch's mean loss."""
    policy = model.policy
    opt = opt or torch.optim.Adam(policy.parameters(), lr=3e-4)
    rng = np.random.default_rng(seed)
    loss_sum = 0.0
    policy.set_training_mode(True)
    for _ in range(epochs):
        order = rng.permutation(len(obs))
        loss_sum, n = 0.0, 0
        for i in range(0, len(order), 128):
            idx = order[i : i + 128]
            x, _ = policy.obs_to_tensor(obs[idx])
            dist = policy.get_distribution(x)
            y = torch.as_tensor(labels[idx], device=policy.device)
            if isinstance(model.action_space, gym.spaces.Box):
                loss = nn.functional.mse_loss(dist.distribution.mean, y)
            else:
                loss = nn.functional.cross_entropy(dist.distribution.logits, y.long().reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum, n = loss_sum + float(loss.detach()) * len(idx), n + len(idx)
        loss_sum /= max(1, n)
    policy.set_training_mode(False)
    return loss_sum


def anchored_ppo_class() -> Any:
    from stable_baselines3 import PPO

    class AnchoredPPO(PPO):
        """SB3's PPO, and after each update `anchor_epochs` passes of behaviour cloning over the update's own rollout,
        each frame labelled by the track expert that the training environments carry (ExpertLabel): DAgger on the
        states PPO itself visits, by an Adam of its own at PPO's current learning rate. Written here: SB3 has no
        auxiliary imitation loss; the labels are recorded as SB3 hands each step's infos over (_update_info_buffer),
        for the frame the rollout buffer stores next."""

        anchor_epochs = 0

        def _excluded_save_params(self) -> list[str]:
            return [*super()._excluded_save_params(), "anchor_labels", "anchor_current", "anchor_opt"]

        def _setup_learn(self, *args: Any, **kwargs: Any) -> Any:
            out = super()._setup_learn(*args, **kwargs)  # resets the environments
            if self.anchor_epochs:
                self.anchor_current = _reset_labels(self.env)
                self.anchor_labels = np.zeros((self.n_steps, *self.anchor_current.shape), np.float32)
                self.anchor_opt = torch.optim.Adam(self.policy.parameters(), lr=self.lr_schedule(1.0))
            return out

        def _update_info_buffer(self, infos: list[dict], dones: np.ndarray | None = None) -> None:
            super()._update_info_buffer(infos, dones)
            if self.anchor_epochs and dones is not None:  # the frame the buffer stores next is the one these labels are for
                self.anchor_labels[self.rollout_buffer.pos] = self.anchor_current
                self.anchor_current = _labels(infos, self.env.unwrapped.reset_infos, dones)

        def train(self) -> None:
            super().train()
            if not self.anchor_epochs:
                return
            for group in self.anchor_opt.param_groups:
                group["lr"] = self.lr_schedule(self._current_progress_remaining)
            buf, labels = self.rollout_buffer, self.anchor_labels  # (n_steps, envs, ...)
            if buf.generator_ready:  # PPO's update flattened its buffer environment by environment (swap_and_flatten)
                labels = labels.swapaxes(0, 1)
            labels = labels.reshape(self.n_steps * self.n_envs, -1)
            obs = buf.observations.reshape(len(labels), *buf.obs_shape)
            if isinstance(self.action_space, gym.spaces.Discrete):
                labels = labels[:, 0]
            loss = behaviour_clone(self, obs, labels, self.anchor_epochs, (self.seed or 0) + self._n_updates, self.anchor_opt)
            self.logger.record("train/anchor_loss", loss)

    return AnchoredPPO


def warm_start(model: Any, cfg: PPOTrainConfig, log: dict[str, Any]) -> None:
    """Behaviour cloning on expert-driven steps, then DAgger rounds (beta 0.5 ** round)."""
    venv = vec_env(cfg, min(cfg.envs, 2), cfg.seed + 1000)  # two workers: cheap data collection
    rng = np.random.default_rng(cfg.seed)
    try:
        xs, ys, rets = collect(model, venv, cfg.warm_steps, 1.0, rng, "expert steps")
        log["warm"] = [{"round": 0, "steps": len(xs), "expert_returns": rets, "bc_loss": behaviour_clone(model, xs, ys, cfg.bc_epochs, cfg.seed)}]
        for r in range(1, cfg.dagger_rounds + 1):
            x, y, rets = collect(model, venv, cfg.dagger_steps, 0.5**r, rng, f"DAgger round {r}")
            xs, ys = np.concatenate([xs, x]), np.concatenate([ys, y])
            loss = behaviour_clone(model, xs, ys, cfg.bc_epochs, cfg.seed + r)
            log["warm"].append({"round": r, "steps": len(x), "mixed_returns": rets, "bc_loss": loss})
    finally:
        venv.close()


TRUNCATED = 200  # value pre-fit: the last steps of each environment's drive, whose returns the drive's end cuts short, are
# left out of the fit (gamma 0.99 weighs a step 200 ahead by 0.13)


def prefit_value(model: Any, steps: int, epochs: int, seed: int) -> dict[str, float]:
    """PPO's value function fitted to the warm-started policy's own discounted returns, in PPO's training environment
    (its reward normalisation warmed up by the same steps), the policy's action head and the shared features frozen:
    a fresh critic's advantages are noise, and the first PPO updates would follow that noise away from the warm start.
    Returns the fit's mean squared error before and after, and the share of the returns' variance it explains."""
    venv, policy = model.get_env(), model.policy
    obs = venv.reset()
    xs, rewards, dones = [], [], []
    for _ in range(max(1, steps // venv.num_envs)):
        action, _ = model.predict(obs, deterministic=False)
        xs.append(obs.copy())
        obs, r, done, _ = venv.step(action)
        rewards.append(r)
        dones.append(done)
    rewards_, dones_ = np.array(rewards), np.array(dones)  # (T, envs)
    returns = np.zeros_like(rewards_)
    running = np.zeros(venv.num_envs)
    for t in range(len(rewards_) - 1, -1, -1):  # discounted, cut at each episode's end
        running = rewards_[t] + model.gamma * running * (1.0 - dones_[t])
        returns[t] = running
    keep = max(1, len(rewards_) - TRUNCATED)
    x = np.concatenate(xs[:keep])
    y = torch.as_tensor(returns[:keep].reshape(-1), dtype=torch.float32, device=policy.device)
    critic = [*policy.mlp_extractor.value_net.parameters(), *policy.value_net.parameters()]
    opt = torch.optim.Adam(critic, lr=3e-4)
    rng = np.random.default_rng(seed)

    def values(idx: np.ndarray) -> torch.Tensor:
        t, _ = policy.obs_to_tensor(x[idx])
        with torch.no_grad():  # the features (the critic's own or the shared ones) stay the warm start's
            features = policy.extract_features(t)
        features = features[1] if isinstance(features, tuple) else features
        return policy.value_net(policy.mlp_extractor.forward_critic(features)).flatten()

    def mse() -> float:
        with torch.no_grad():
            return sum(float(((values(i) - y[i]) ** 2).sum()) for i in np.array_split(np.arange(len(x)), max(1, len(x) // 256))) / len(x)

    before = mse()
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(order), 128):
            idx = order[i : i + 128]
            loss = nn.functional.mse_loss(values(idx), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = mse()
    return {"steps": int(len(x)), "mse_before": before, "mse_after": after, "explained_variance": 1.0 - after / max(float(y.var()), 1e-12)}


LOG = "train_log.json"  # a PPO run's log: the warm start, the value pre-fit, every evaluation (the learning curve), the best


def _seeded_eval_class() -> Any:
    from stable_baselines3.common.callbacks import EvalCallback

    class SeededEval(EvalCallback):
        """SB3's EvalCallback, re-seeding its environment before each evaluation so that every
        candidate drives the same held-out tracks (SB3's own continues one random stream, so
        each evaluation would see other tracks and "best" would partly be luck)."""

        def __init__(self, seed: int, on_eval: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.eval_seed, self.on_eval = seed, on_eval

        def _on_step(self) -> bool:
            due = self.eval_freq > 0 and self.n_calls % self.eval_freq == 0
            if due:
                self.eval_env.seed(self.eval_seed)
            go_on = super()._on_step()
            if due:  # the learning curve and the best so far, written as they come (an interruption keeps them)
                self.on_eval(int(self.evaluations_timesteps[-1]), self.evaluations_results[-1])
            return go_on

    return SeededEval


def train_ppo(cfg: PPOTrainConfig, resume: bool = False) -> dict[str, Any]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.utils import LinearSchedule
    from stable_baselines3.common.vec_env import VecNormalize, VecTransposeImage

    _SeededEval = _seeded_eval_class()
    AnchoredPPO = anchored_ppo_class()

    out = Path(cfg.out)
    ckpt_dir = out / "checkpoints"
    latest = sorted(ckpt_dir.glob("ppo_*_steps.zip"), key=lambda p: int(p.stem.split("_")[1])) if ckpt_dir.is_dir() else []
    if resume:
        if not (out / "config.json").is_file():
            raise ConfigError(f"nothing to resume in {out}: no PPO run there")
        cfg = PPOTrainConfig(**{**read_json(out / "config.json")["train"], "timesteps": cfg.timesteps})
    elif holds_anything(out):
        raise ConfigError(f"{out} is not empty; use --resume to continue the PPO run there, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    logs = [p for p in (out / LOG, out / "log.json") if p.is_file()]  # log.json: runs from before the name
    log: dict[str, Any] = read_json(logs[0]) if logs else {}
    hyper = zoo_hyperparameters(cfg.continuous)
    write_json(out / "config.json", {"train": asdict(cfg), "hyperparameters": hyper})

    venv = vec_env(cfg, cfg.envs, cfg.seed)
    # wrapped as SB3 wraps the training env (image transpose outside the normalisation), or its EvalCallback cannot sync
    # the two at its first evaluation
    eval_env = VecTransposeImage(VecNormalize(vec_env(cfg, 1, cfg.eval_seed), norm_obs=False, norm_reward=False, training=False))
    schedule = LinearSchedule(cfg.learning_rate, 0.0, 1.0)  # progress left x lr
    if resume and latest:
        steps = latest[-1].stem.split("_")[1]
        venv = VecNormalize.load(str(ckpt_dir / f"ppo_vecnormalize_{steps}_steps.pkl"), venv)
        model = AnchoredPPO.load(str(latest[-1]), env=venv, device=cfg.device, tensorboard_log=str(out / "tb"))
    else:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True)
        model = AnchoredPPO(
            "CnnPolicy", venv, learning_rate=schedule, seed=cfg.seed, device=cfg.device, tensorboard_log=str(out / "tb"), verbose=0,
            **{k: v for k, v in hyper.items() if k != "policy_kwargs"}, policy_kwargs=policy_kwargs(run_policy_kwargs(cfg.continuous, cfg.shared_features)),
        )
        if cfg.warm_start == "track" and "warm" not in log:
            warm_start(model, cfg, log)
            if not cfg.shared_features:  # the critic starts from the cloned features (its pre-fit fits its head on them)
                model.policy.vf_features_extractor.load_state_dict(model.policy.pi_features_extractor.state_dict())
            if model.use_sde:
                model.policy.log_std.data.fill_(cfg.warm_log_std)
                model.policy.reset_noise(cfg.envs)
            if cfg.value_steps:
                log["value_prefit"] = prefit_value(model, cfg.value_steps, cfg.value_epochs, cfg.seed)
            write_json(out / LOG, log)
            model.save(str(ckpt_dir / "ppo_0_steps"))
            venv.save(str(ckpt_dir / "ppo_vecnormalize_0_steps.pkl"))
    # the run's own settings, a resumed run's too (PPO.load restores the ones it was saved with)
    model.anchor_epochs, model.target_kl, model.learning_rate, model.lr_schedule = cfg.anchor_epochs, cfg.target_kl, schedule, schedule
    best_zip = out / "best" / "best_model.zip"
    if "best_eval" not in log:  # the starting point (the warm start) is the first candidate for the export
        eval_env.seed(cfg.eval_seed)
        mean, std = evaluate_policy(model, eval_env, n_eval_episodes=cfg.eval_episodes, deterministic=True)
        model.save(str(best_zip.with_suffix("")))
        log["best_eval"] = {"timesteps": int(model.num_timesteps), "mean_return": float(mean), "std_return": float(std)}
        write_json(out / LOG, log)
    def on_eval(timesteps: int, returns: list[float]) -> None:
        mean = float(np.mean(returns))
        log.setdefault("evaluations", []).append({"timesteps": timesteps, "mean_return": mean})
        if mean > log["best_eval"]["mean_return"]:  # EvalCallback saved it as best_model.zip
            log["best_eval"] = {"timesteps": timesteps, "mean_return": mean, "std_return": float(np.std(returns))}
        write_json(out / LOG, log)

    evaluator = _SeededEval(
        cfg.eval_seed, on_eval, eval_env, eval_freq=max(1, cfg.eval_every // cfg.envs), n_eval_episodes=cfg.eval_episodes,
        best_model_save_path=str(out / "best"), log_path=str(out / "eval"), deterministic=True, verbose=0,
    )
    evaluator.best_mean_reward = log["best_eval"]["mean_return"]  # PPO must beat what it started from
    callbacks = [CheckpointCallback(max(1, cfg.checkpoint_every // cfg.envs), str(ckpt_dir), name_prefix="ppo", save_vecnormalize=True), evaluator]
    def checkpoint() -> None:
        model.save(str(ckpt_dir / f"ppo_{model.num_timesteps}_steps"))
        venv.save(str(ckpt_dir / f"ppo_vecnormalize_{model.num_timesteps}_steps.pkl"))

    try:
        # SB3 counts a resumed learn's steps on top of those done, so asking for what is left keeps its progress (and the
        # learning rate's linear decay, lr x (1 - steps / timesteps)) where an uninterrupted run would have it
        left = cfg.timesteps - model.num_timesteps
        if left > 0:
            model.learn(total_timesteps=left, callback=callbacks, reset_num_timesteps=not resume, tb_log_name="ppo", progress_bar=True)
        checkpoint()  # the end is a checkpoint too: --resume goes on from here
    except KeyboardInterrupt:
        checkpoint()
        raise KeyboardInterrupt(f"PPO interrupted at {model.num_timesteps} steps; --resume continues") from None
    finally:
        venv.close()
        eval_env.close()
    # The export is the best policy on the held-out evaluation seeds, not merely the last one:
    # PPO updates with a fresh value function can undo a warm start.
    export(PPO.load(str(best_zip), device=cfg.device), cfg, out / PPO_EXPORT)
    log["timesteps"] = int(model.num_timesteps)
    write_json(out / LOG, log)
    return {"out": str(out), "continuous": cfg.continuous, "timesteps": int(model.num_timesteps), "expert": str(out / PPO_EXPORT), **log}


def export(model: Any, cfg: PPOTrainConfig, directory: Path) -> None:
    """The policy network as safetensors + JSON (no pickles): what PPOExpert loads."""
    directory.mkdir(parents=True, exist_ok=True)
    save_model(model.policy, str(directory / "policy.safetensors"))  # handles the shared feature extractor
    write_json(directory / "config.json", {
        "expert": "ppo", "continuous": cfg.continuous, "skip": SKIP, "size": SIZE, "stack": STACK,
        "use_sde": bool(model.use_sde), "policy_kwargs": run_policy_kwargs(cfg.continuous, bool(model.policy.share_features_extractor)),
    })


def bench_ppo(envs: tuple[int, ...] = (1, 2, 8), continuous: bool = True, n_steps: int | None = None, gym_steps: int = 300,
              seed: int = 0) -> list[dict[str, Any]]:
    """What bounds PPO's training here, each rate beside gymnasium's CarRacing-v3 step measured in the same run
    (x_gymnasium: PPO's steps a second over gymnasium's steps a second in one process):

    - gymnasium's env.step alone, and one step of PPO's training environment in one process (the zoo's pipeline: frame
      skip 2 of nac-drive's CarRacing, resized, grey);
    - for each count of environments (SubprocVecEnv workers, DummyVecEnv for one): one PPO iteration with the zoo's
      settings, its rollout (n_steps per environment, the policy's forward included) and its update (10 epochs of
      batches of 128) timed apart, as steps a second of each and of the whole iteration."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    def rate(make: Any, steps: int, step: Any) -> float:
        env = make()
        env.reset(seed=seed)
        env.action_space.seed(seed)
        t0 = time.perf_counter()
        for _ in range(steps):
            if any(step(env)[2:4]):
                env.reset()
        seconds = time.perf_counter() - t0
        env.close()
        return steps / seconds

    gas = np.array([0.0, 0.5, 0.0], dtype=np.float32)
    gym_rate = rate(lambda: gym.make("CarRacing-v3", continuous=True), gym_steps, lambda e: e.step(gas))
    ppo_env_rate = rate(lambda: make_ppo_env(True, labels=False), gym_steps // SKIP, lambda e: e.step(gas))
    rows = [{"what": "env.step", "name": "gymnasium CarRacing-v3", "steps_per_s": gym_rate, "x_gymnasium": 1.0},
            {"what": "env.step", "name": f"PPO's training environment (frame skip {SKIP}), one process", "steps_per_s": ppo_env_rate,
             "x_gymnasium": ppo_env_rate / gym_rate}]
    hyper = zoo_hyperparameters(continuous)
    if n_steps is not None:
        hyper = {**hyper, "n_steps": n_steps, "batch_size": min(hyper["batch_size"], n_steps)}
    cfg = PPOTrainConfig(out="", continuous=continuous)
    for n in envs:
        venv = VecNormalize(vec_env(cfg, n, seed), norm_obs=False, norm_reward=True)
        model = PPO("CnnPolicy", venv, learning_rate=cfg.learning_rate, seed=seed, device="cpu", verbose=0,
                    **{k: v for k, v in hyper.items() if k != "policy_kwargs"}, policy_kwargs=policy_kwargs(run_policy_kwargs(cfg.continuous, cfg.shared_features)))
        update_s: list[float] = []
        train = model.train

        def timed_train() -> None:
            t0 = time.perf_counter()
            train()
            update_s.append(time.perf_counter() - t0)

        model.train = timed_train  # type: ignore[method-assign]
        steps = hyper["n_steps"] * n
        t0 = time.perf_counter()
        model.learn(total_timesteps=steps)
        total = time.perf_counter() - t0
        venv.close()
        rollout = total - sum(update_s)
        rows.append({"what": "PPO iteration", "name": f"{n} environment{'s' if n > 1 else ''}", "envs": n, "steps": steps,
                     "rollout_s": rollout, "update_s": sum(update_s), "rollout_steps_per_s": steps / rollout,
                     "update_steps_per_s": steps / sum(update_s), "steps_per_s": steps / total, "x_gymnasium": steps / total / gym_rate})
    return rows
