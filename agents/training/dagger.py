"""DAgger (Ross et al. 2011): drive with the policy, let the expert label every visited frame,
add the frames to the data and train on.

Round r executes the expert's action with probability beta**r and the policy's otherwise (the
policy sees every frame either way, so its window is never broken); the recorded label is
always the expert's. With a takeover gate (`takeover` > 0, as in SafeDAgger / HG-DAgger: the
expert intervenes where the policy is about to fail) the expert also drives while the car is
more than `takeover` u/s faster than the expert's target speed there, has a wheel off the
road or has stalled (slower than STALL_SPEED after the first STALL_AFTER steps), and for
TAKEOVER_HOLD steps after: with beta 0 the policy drives until it errs, the
rollouts reach the states where it fails (a bend entered too fast) and record the expert's way
out of them, without hundreds of frames of a car lost on the grass. The rollouts go to <run>/dagger, a demonstration set like any other, and
training continues the same run (same validation episodes) with that folder added to its data.
Each round's progress is kept in <run>/dagger.json, so an interrupted DAgger run resumes.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from agents.training.tasks import train
from agents.training.loop import TrainConfig
from agents.training.collect import Recorder, demo_header, save_recording
from agents.carracing.seeds import CHECK_SEED, DAGGER_SEED
from agents.carracing.env import OffRoadLimit, make_env, seeds_with_bend, wheels_off_road
from agents.evaluation.evaluate import EvaluateConfig, evaluate
from agents.experts import EXPERTS, check_expert, make_expert
from agents.driving.policy import DrivingPolicy
from agents.driving.executor import storage_path
from agents.carracing import perturb as perturbations
from agents.driving.rollout import Rollouts, parallel_map, run_episode, run_episodes
from datasets.demos import DemoSet
from nac.checkpoint import write_json
from nac.config import ConfigDict, ConfigError, need

FIRST_SEED = DAGGER_SEED  # DAgger rollouts use seeds from here on (agents.carracing.seeds)
# A check episode that reached fewer of its track's tiles than this lost the track (off the road for good, turned round, stalled):
# a policy that drives every bend ends its lap within 1000 steps or, on the longest tracks, a few tiles short of it, and a lap
# lost to one skipped tile still reaches 99 % (docs/studies/discrete-heads/README.md, 'Lost tracks, not slow laps')
LOST_TILES = 0.95
TAKEOVER_HOLD = 10  # steps the expert keeps driving after its takeover's cause has cleared (0.2 s)
# a policy that has braked to a stop sees still frames and keeps still (BC's inertia problem), so standing still is a
# cause of takeover too
STALL_SPEED, STALL_AFTER = 5.0, 50  # u/s, steps (the car starts from rest)


SELECTS = ("last", "check")  # DaggerConfig.select


@dataclass
class DaggerRecipe(ConfigDict):
    """How the DAgger rounds after behaviour cloning go: the recipe's part of a DAgger run (agents.training.recipe.Recipe holds
    one; DaggerConfig is one, with the run, the expert and where the rollouts drive)."""

    WHAT = "DAgger fields"

    rounds: int = 2  # rounds of rollouts and training (the recipe's two)
    until: float = 0.0  # > 0: after `rounds`, one more round while the last round falls short, up to max_rounds in all: its clean
    # rollouts' mean return below this, or its trained weights, driving `check` episodes alone, below it or losing a track
    # (reaching fewer than 95 % of its tiles). The extra rounds go only to a run that needs them; 0: exactly `rounds`
    check: int = 16  # with until: the episodes each round's trained weights drive alone (check seeds, the same every round, apart
    # from evaluation's). Failures are rare, so each episode is judged, not only the mean; 0: judge the round's own clean rollouts
    max_rounds: int = 0  # with until: the most rounds in all (more than rounds)
    episodes: int = 10  # policy rollouts per round
    beta: float | None = None  # round r executes the expert's action with probability beta ** r (0: the policy drives alone).
    # Default: the recipe's for the run's head and action space, 0.5 for NAC and discrete runs, 0.3 for the other heads (recipe_beta)
    epochs: int = 2  # training epochs added per round
    average: int = 1  # > 1: the weights the run leaves (which an evaluation drives) are the mean of its last K rounds' own best
    # weights, from round 2 on (stochastic weight averaging, Izmailov et al. 2018); each round's rollouts and check are driven
    # by its own weights, kept in RUN/rounds/. 1: the last round's own
    select: str = field(default="last", metadata={"choices": SELECTS})  # the weights the run leaves: last, the last round's own
    # (or their mean, with average); check, the round's own (behaviour cloning's, round 0, included) that drove the `check`
    # episodes best, each round's weights checked once after the last round (a later round wins a tie): DAgger's last round
    # can train weights that drive worse than the round before (docs/studies/generalization, "The runs that lost clean laps")
    minutes: float | None = None  # also stop a round's training after this many minutes
    bend: float = 0.0  # > 0: the rollouts drive only tracks with a bend of at least this many degrees within 12 segments
    # (agents.carracing.env.sharpest_bend; 150: hairpins, about one track in six), the next `episodes` of them from seed_start
    # on each round: the policy's own states where it loses tracks, labelled. 0: every track
    off_road_steps: int = 0  # > 0: a rollout ends once all four wheels have been off the road this many steps in a row: the
    # expert's labels for the way back are kept, the frames of a car lost on the grass are not (0: never)
    takeover: float = 0.0  # > 0: the expert also drives while the car is more than this many u/s over the track expert's target
    # speed, has a wheel off the road or has stalled (and 10 steps after), so that with beta 0 the policy drives until it errs
    # and the rollouts record the expert's way out (SafeDAgger-style); 0: no takeover
    perturb: str = "auto"  # the policy drives the rollouts on odd seeds (half of each round's) under this perturbation, as
    # 'evaluate --perturb' takes it (jitter=3: frames arrive 1..3 steps apart); the expert labels every frame, so the data shows
    # the way back from where late or missing frames lead the policy. none: never; auto: the run's own frame gaps, jitter=J for a
    # run trained on gaps of 1..J, none for regular windows

    def __post_init__(self) -> None:
        need(self.rounds >= 0, f"rounds must be >= 0 (0: behaviour cloning alone; got {self.rounds})")
        need(self.until >= 0, f"until must be >= 0 (a return; 0: no extra rounds; got {self.until})")
        need(not self.until or self.max_rounds > self.rounds,
             f"with until, max-rounds (the most rounds in all) must be more than rounds ({self.rounds}; "
             + (f"got {self.max_rounds})" if self.max_rounds else "none given)"))
        need(self.check >= 0, f"check must be >= 0 (episodes; 0: judge the rollouts; got {self.check})")
        need(self.episodes >= 1, f"episodes must be >= 1 (got {self.episodes})")
        need(0.0 <= self.bend < 180.0, f"bend must be in [0, 180) degrees (0: every track; got {self.bend})")
        need(self.beta is None or 0.0 <= self.beta < 1.0, f"beta must be in [0, 1) (got {self.beta})")
        need(self.epochs >= 1, f"epochs must be >= 1 (got {self.epochs})")
        need(self.average >= 1, f"average must be >= 1 (rounds; 1: a round's own weights; got {self.average})")
        need(self.select in SELECTS, f"select must be one of {', '.join(SELECTS)} (got {self.select!r})")
        need(self.select != "check" or (self.check >= 1 and self.average == 1),
             f"select check needs check >= 1 episodes and average 1 (got check {self.check}, average {self.average})")
        need(self.minutes is None or self.minutes > 0, f"minutes must be > 0 (got {self.minutes})")
        need(self.off_road_steps >= 0, f"off-road steps must be >= 0 (got {self.off_road_steps})")
        need(self.takeover >= 0, f"takeover must be >= 0 u/s (got {self.takeover}; 0 turns the gate off)")
        if self.perturb not in ("auto", perturbations.CLEAN):
            try:
                perturbations.parse(self.perturb)
            except ConfigError as e:
                raise ConfigError(f"{e}; or auto (the run's own frame gaps)") from None


@dataclass(kw_only=True)
class DaggerConfig(DaggerRecipe, Rollouts):
    """DAgger rounds on a trained run (`nacdrive dagger`): a DAgger recipe (DaggerRecipe's fields) for this run, labelled by
    this expert, its rollouts driven as Rollouts says."""

    run: str  # a run folder from 'nacdrive train'
    expert: str = field(default="track", metadata={"choices": EXPERTS})  # who labels the visited frames
    seed_start: int = FIRST_SEED  # rollout seeds: seed_start + (r - 1) * episodes + i in round r

    def __post_init__(self) -> None:
        DaggerRecipe.__post_init__(self)
        Rollouts.__post_init__(self)
        self.run = storage_path(self.run, self.ray)
        check_expert(self.expert)  # the name, and for ppo a shipped model, before any rollout
        need(self.rounds >= 1, f"rounds must be >= 1 (got {self.rounds})")


def recipe_beta(head: str, continuous: bool) -> float:
    """DAgger's beta by the recipe, for a run whose recipe gives none (the presets of agents.training.recipe give their own).

    0.3 for continuous runs of the baselines: at 0.5 the attention heads crashed in some runs (docs/studies/mha-rope/,
    'MHA with positions'). 0.5 for the NAC family (so that its ablations share the recipe): at 0.3 its runs lost laps with
    dropped or irregular frames (docs/studies/mha-rope/, 'Perturbed DAgger rollouts'). 0.5 for discrete runs, whose wheel
    recipe drove worse at 0.3 (docs/studies/discrete-brake-weights/)."""
    return 0.5 if not continuous or head.startswith("nac") else 0.3


class MixedDriver:
    """Executes the expert's action with probability beta, else the policy's; both see every
    frame. With `takeover` > 0 the expert also drives while the car on `env` is more than
    `takeover` u/s over its target speed, has a wheel off the road or has stalled, and
    TAKEOVER_HOLD steps after. `label` is the expert's action on the latest frame; `expert_steps` counts the steps
    the expert's action was executed since reset."""

    def __init__(self, policy: DrivingPolicy, expert: Any, beta: float, seed: int, takeover: float = 0.0, env: Any = None) -> None:
        need(not takeover or env is not None, "a takeover gate needs the environment")
        self.policy, self.expert, self.beta, self.takeover, self.env = policy, expert, beta, takeover, env
        self.rng = np.random.default_rng(seed)
        self.label: Any = None
        self.expert_steps = self._hold = self._t = 0

    def reset(self) -> None:
        self.policy.reset()
        self.reset_mix()

    def reset_mix(self) -> None:
        self.expert.reset()
        self.expert_steps = self._hold = self._t = 0

    def _gate(self) -> bool:
        """Whether the expert takes over on this step (called after the expert chose its label)."""
        if not self.takeover:
            return False
        excess = getattr(self.expert, "speed_excess", math.nan)  # NaN (no gate on speed) for an expert without a target speed
        self._t += 1
        stalled = self._t > STALL_AFTER and math.hypot(*self.env.unwrapped.car.hull.linearVelocity) < STALL_SPEED
        if wheels_off_road(self.env) > 0 or excess > self.takeover or stalled:
            self._hold = TAKEOVER_HOLD
            return True
        if self._hold:
            self._hold -= 1
            return True
        return False

    def select_action(self, obs: Any) -> Any:
        return self.choose(obs, self.policy.select_action(obs))

    def choose(self, obs: Any, action: Any) -> Any:
        """The action executed on this frame: the expert's label or the policy's `action`."""
        self.label = self.expert.select_action(obs)
        gated = self._gate()
        if gated or self.rng.random() < self.beta:
            self.expert_steps += 1
            return self.label
        return action


class BatchMixedDriver:
    """Several rollouts' MixedDrivers stepped together: one batched forward of their shared policy a step
    (agents.driving.rollout.run_episodes), each rollout's expert, gate and draws its own. `observers` wraps each
    rollout's observer so that a rollout that has ended draws and labels no more while the others go on."""

    def __init__(self, policy: DrivingPolicy, mixes: list[MixedDriver]) -> None:
        self.policy, self.mixes = policy, mixes
        self.ended = [False] * len(mixes)

    def reset_batch(self, seeds: list[int]) -> None:
        self.policy.reset_batch(seeds)
        for mix in self.mixes:
            mix.reset_mix()
        self.ended = [False] * len(self.mixes)

    def select_actions(self, frames: np.ndarray) -> list[Any]:
        actions = self.policy.select_actions(frames)
        return [a if ended else mix.choose(f, a) for mix, f, a, ended in zip(self.mixes, frames, actions, self.ended)]

    def observers(self, inner: list[Any]) -> list[Any]:
        return [_EndsMix(self, i, obs) for i, obs in enumerate(inner)]


class _EndsMix:
    def __init__(self, batch: BatchMixedDriver, i: int, inner: Any) -> None:
        self.batch, self.i, self.inner = batch, i, inner

    def before_step(self, env: Any, obs: Any, action: Any) -> None:
        self.inner.before_step(env, obs, action)

    def after_step(self, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        self.inner.after_step(obs, reward, terminated, truncated, info)
        self.batch.ended[self.i] = terminated or truncated


def more_rounds(cfg: DaggerConfig, rounds: list[dict[str, Any]], done: int, episodes: list[dict[str, Any]]) -> bool:
    """Whether a round follows the `done` trained ones (`episodes`: the run's rollouts): one begun (its rollouts, maybe interrupted) is
    finished; then up to cfg.rounds; then while the last round falls short (falls_short), up to cfg.max_rounds."""
    if done < len(rounds) or done < cfg.rounds:
        return True
    return bool(cfg.until) and done < cfg.max_rounds and falls_short(cfg, rounds[-1], episodes)


def wants_check(cfg: DaggerConfig, rounds: list[dict[str, Any]], done: int, episodes: list[dict[str, Any]]) -> bool:
    """Whether the last trained round's weights are to be checked now: more_rounds will judge them, their round's rollouts do not
    call for another round already, and they were not checked yet (a check stored before checks kept each episode's tiles is
    driven again)."""
    return (bool(cfg.until and cfg.check) and done == len(rounds) and cfg.rounds <= done < cfg.max_rounds
            and "tiles" not in rounds[-1].get("check", {}) and not rollouts_short(cfg, rounds[-1], episodes))


def rollouts_short(cfg: DaggerConfig, last: dict[str, Any], episodes: list[dict[str, Any]]) -> bool:
    """The mean of the round's clean rollouts below cfg.until (not those driven under `perturb`: they are there for data from
    where late frames lead, and crash by design). NaN, none clean, is not short."""
    return clean_mean_return(episodes, last["seeds"]) < cfg.until


def falls_short(cfg: DaggerConfig, last: dict[str, Any], episodes: list[dict[str, Any]]) -> bool:
    """Whether the round calls for another: its clean rollouts short (rollouts_short), or with a check, its trained weights' mean
    return there below cfg.until or a check episode that lost its track (reached fewer than LOST_TILES of its tiles). Both are
    looked at because each has missed a weak draw the other saw (docs/studies/discrete-heads/README.md, 'Lost tracks, not slow
    laps')."""
    if rollouts_short(cfg, last, episodes):
        return True
    check = last.get("check") if cfg.check else None
    return check is not None and (check["mean_return"] < cfg.until or min(check["tiles"]) < LOST_TILES)


def round_weights(run: Path, r: int) -> Path:
    """Where round r's own best weights are kept (0: behaviour cloning's)."""
    return run / "rounds" / f"r{r}.safetensors"


def _copy_weights(src: Path, dst: Path) -> None:
    """Copy a weights file atomically (a temporary file, then rename), as checkpoints are written."""
    dst.parent.mkdir(exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def keep_round_weights(run: Path, r: int) -> None:
    """Keep a copy of the run's best weights as they stand after round r (0: behaviour cloning) in <run>/rounds/r<r>.safetensors,
    once: later rounds overwrite best.safetensors, and each round's weights are what a run stopped there would have driven."""
    if not round_weights(run, r).is_file() and (run / "best.safetensors").is_file():
        _copy_weights(run / "best.safetensors", round_weights(run, r))


def average_rounds(run: Path, rounds: list[int]) -> None:
    """best.safetensors := the mean of these rounds' kept weights (the wirings' masks are float tensors, the same in every round,
    so their mean is themselves; integer tensors, which these networks have none of, are kept as the first round's). By hand:
    torch.optim.swa_utils averages a model's weights as training goes, not files."""
    states = [load_file(str(round_weights(run, k))) for k in rounds]
    mean = {key: torch.stack([s[key].double() for s in states]).mean(0).to(v.dtype) if v.is_floating_point() else v
            for key, v in states[0].items()}
    tmp = run / ".best.safetensors.tmp"
    save_file(mean, str(tmp))
    tmp.replace(run / "best.safetensors")


def select_by_check(cfg: DaggerConfig, run: Path, state: dict[str, Any], last: int) -> None:
    """best.safetensors := the kept weights of the round 0..last that drove cfg.check episodes best (their mean return; a
    later round wins a tie). A round checked already (by `until`, or an earlier call) is not driven again; each check is
    stored as it finishes (round 0's as bc_check), so a stop loses at most one."""
    state_path = run / "dagger.json"
    checks = {}
    for k in range(last + 1):
        holder = state["rounds"][k - 1] if k else state
        name = "check" if k else "bc_check"
        if "tiles" not in holder.get(name, {}):
            _copy_weights(round_weights(run, k), run / "best.safetensors")  # a check drives the run's best weights
            holder[name] = check_weights(cfg, run)
            write_json(state_path, state)
        checks[k] = holder[name]["mean_return"]
    state["selected"] = max(checks, key=lambda k: (checks[k], k))
    _copy_weights(round_weights(run, state["selected"]), run / "best.safetensors")
    write_json(state_path, state)


def check_weights(cfg: DaggerConfig, run: Path) -> dict[str, Any]:
    """The run's best weights driving cfg.check episodes alone (seeds CHECK_SEED..): the evaluation's own episodes, without the
    expert's reference rows."""
    row = evaluate(EvaluateConfig(runs=[str(run)], episodes=cfg.check, seed_start=CHECK_SEED, workers=cfg.workers, ray=cfg.ray,
                                  expert=False, max_steps=cfg.max_steps))[0]
    return {"seeds": row["seeds"], "returns": row["returns"], "tiles": row["tiles"], "mean_return": row["mean_return"],
            "finished_share": row["finished_share"]}


def selected_weights(state: dict[str, Any]) -> str:
    """Which round's weights select_by_check kept, beside every round's check (for a job's summary)."""
    checks = [("behaviour cloning", state["bc_check"])] + [(f"round {r['round']}", r["check"]) for r in state["rounds"]]
    return (f"{checks[state['selected']][0]}'s own, which drove the check seeds best ("
            + ", ".join(f"{name} {c['mean_return']:.1f}" for name, c in checks) + ")")


def check_worst(check: dict[str, Any]) -> str:
    """A check's worst episode, and the least share of its tiles an episode reached (a check kept before it was recorded: none)."""
    tiles = f", least tiles {min(check['tiles']):.0%}" if "tiles" in check else ""
    return f"worst {min(check['returns']):.1f}{tiles}"


def clean_mean_return(episodes: list[dict[str, Any]], seeds: list[int]) -> float:
    """The mean return of a round's rollouts (these seeds) that the policy drove unperturbed; NaN if none."""
    wanted = set(seeds)
    returns = [e["return"] for e in episodes if e["seed"] in wanted and not e.get("perturb")]
    return float(np.mean(returns)) if returns else math.nan


def rollout_perturbation(perturb: str, stride_jitter: int) -> str | None:
    """The perturbation a run's perturbed rollouts drive under (None: none), for DaggerConfig.perturb
    and the run's training windows' largest frame gap."""
    if perturb == "auto":
        return f"jitter={stride_jitter}" if stride_jitter > 1 else None
    return None if perturb == perturbations.CLEAN else perturb


def rollout_returns(r: dict[str, Any]) -> str:
    """A round's rollout mean return, with the perturbed rollouts' apart: "911.5 (under jitter=3: 903.0)"."""
    text = f"{r.get('rollout_mean_return', math.nan):.1f}"
    return text + (f" (under {r['perturb']}: {r['perturbed_mean_return']:.1f})" if "perturbed_mean_return" in r else "")


def rollout(run: str, expert_name: str, beta: float, out: str, max_steps: int, off_road_steps: int, takeover: float, spec: str | None,
            seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    """Policy-driven, expert-labelled episodes written into `out`, one per seed; their manifest entries. On an odd seed the
    policy drives under the perturbation `spec` (None: never), one episode at a time as its frames arrive; the others are
    stepped together, one batched forward a step (each episode the one it would be alone, up to the float rounding of a
    batched forward)."""
    torch.set_num_threads(1)
    policy = DrivingPolicy.from_run(run, "best")
    continuous = policy.continuous
    envs = [make_env(continuous, max_steps) for _ in seeds]
    if off_road_steps:
        envs = [OffRoadLimit(env, off_road_steps) for env in envs]
    try:
        def save(seed: int, rec: Recorder, result: Any, driver: MixedDriver, perturb: str | None) -> dict[str, Any]:
            return save_recording(out, rec.episode(seed, continuous), result, {"beta": beta, "expert_share": driver.expert_steps / max(result.length, 1),
                                                                               "perturb": perturb})

        out_entries: list[dict[str, Any]] = []
        together = [(env, seed) for env, seed in zip(envs, seeds) if not drives_perturbed(spec, seed)]
        for env, seed in zip(envs, seeds):
            if not drives_perturbed(spec, seed):
                continue
            driving = perturbations.PerturbedPolicy(policy, perturbations.parse(spec), continuous, seed=seed)  # type: ignore[arg-type]
            driver = MixedDriver(driving, make_expert(expert_name, env), beta, seed, takeover, env)
            rec = Recorder(label=lambda d=driver: d.label, expert=driver.expert, saw=lambda p=driving: getattr(p, "saw", True))
            out_entries.append(save(seed, rec, run_episode(env, driver, seed, observer=rec), driver, spec))
        if together:
            mixes = [MixedDriver(policy, make_expert(expert_name, env), beta, seed, takeover, env) for env, seed in together]
            batch = BatchMixedDriver(policy, mixes)
            recs = [Recorder(label=lambda d=mix: d.label, expert=mix.expert, saw=lambda: True) for mix in mixes]
            results = run_episodes([env for env, _ in together], batch, [seed for _, seed in together], observers=batch.observers(recs))
            out_entries += [save(seed, rec, result, mix, None) for (_, seed), mix, rec, result in zip(together, mixes, recs, results)]
        return sorted(out_entries, key=lambda e: e["seed"])
    finally:
        for env in envs:
            env.close()


def round_seeds(cfg: DaggerConfig, r: int) -> list[int]:
    """Round r's rollout seeds: the next cfg.episodes seeds from cfg.seed_start on (with cfg.bend, of those whose track has
    such a bend)."""
    if cfg.bend:
        return seeds_with_bend(cfg.seed_start, cfg.episodes, cfg.bend, skip=(r - 1) * cfg.episodes)
    return [cfg.seed_start + (r - 1) * cfg.episodes + i for i in range(cfg.episodes)]


def drives_perturbed(spec: str | None, seed: int) -> bool:
    """Whether the rollout on this seed is driven under the perturbation spec: the odd seeds, when there is one."""
    return spec is not None and seed % 2 == 1


def rollout_batches(seeds: list[int], spec: str | None, batch: int) -> list[tuple[int, ...]]:
    """The rollouts' tasks: a perturbed one alone, the others `batch` at a time."""
    alone = [(s,) for s in seeds if drives_perturbed(spec, s)]
    together = [s for s in seeds if not drives_perturbed(spec, s)]
    return [tuple(together[i:i + batch]) for i in range(0, len(together), batch)] + alone


def dagger(cfg: DaggerConfig, quiet: bool = False) -> dict[str, Any]:
    run = Path(cfg.run)
    config_path = run / "config.json"
    if not config_path.is_file():
        raise ConfigError(f"{run} is not a training run (no config.json); train one with 'nacdrive train'")
    saved = json.loads(config_path.read_text())
    if saved.get("task") != "carracing" or "train" not in saved:
        raise ConfigError(f"{run} is not a CarRacing training run")
    if not (run / "train_state.json").is_file():
        raise ConfigError(f"{run} has no training state to continue from; finish 'nacdrive train' first")
    continuous = saved["net"]["action_space"] == "continuous"
    data_dir = run / "dagger"
    state_path = run / "dagger.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"rounds": []}
    if not data_dir.is_dir():
        DemoSet.create(data_dir, {**demo_header(cfg.expert, continuous, cfg.max_steps), "driver": "policy with DAgger beta mixing", "planned_seeds": []})
    demos = DemoSet(data_dir)
    demos.recover()
    rounds_done = len([r for r in state["rounds"] if r.get("trained")])
    spec = rollout_perturbation(cfg.perturb, TrainConfig.from_dict(saved["train"]).stride_jitter or 1)
    base = recipe_beta(saved["net"]["head"], continuous) if cfg.beta is None else cfg.beta
    r = rounds_done
    if not rounds_done:
        keep_round_weights(run, 0)  # behaviour cloning's weights, before any round
    elif "average" in state or "selected" in state:
        # best holds the mean or the round this function left: the last round's own weights drive its check and the next rounds,
        # as they did in a run that went on without a stop (a run without either keeps its best as it is, however it was trained since)
        _copy_weights(round_weights(run, rounds_done), run / "best.safetensors")
    while True:
        if wants_check(cfg, state["rounds"], r, demos.episodes):
            state["rounds"][r - 1]["check"] = check_weights(cfg, run)
            write_json(state_path, state)
        if not more_rounds(cfg, state["rounds"], r, demos.episodes):
            break
        r += 1
        beta = base**r
        seeds = round_seeds(cfg, r)
        if len(state["rounds"]) < r:
            state["rounds"].append({"round": r, "beta": beta, "seeds": seeds, "perturb": spec, "trained": False,
                                    **({"extra": True} if r > cfg.rounds else {})})
            write_json(state_path, state)
        todo = [s for s in seeds if s not in set(demos.seeds())]
        if todo:
            tasks = rollout_batches(todo, spec, EvaluateConfig.batch)
            parallel_map(
                partial(rollout, str(run), cfg.expert, beta, str(data_dir), cfg.max_steps, cfg.off_road_steps, cfg.takeover, spec),
                tasks,
                cfg.executor(shared=(str(run),)),
                desc=f"DAgger round {r} rollouts (beta {beta:.2f})",
                on_result=lambda entries: [demos.add(e) for e in entries],
                postfix=lambda done: {"mean return": f"{np.mean([e['return'] for entries in done for e in entries]):.1f}"},
                counts=[len(t) for t in tasks],
            )
        done = [e for e in demos.episodes if e["seed"] in set(seeds)]
        returns = [e["return"] for e in done]
        # continue the same run on the data plus the rollouts, for `epochs` (or `minutes`) more
        train_state = json.loads((run / "train_state.json").read_text())
        tc = TrainConfig.from_dict(saved["train"])
        if "target" not in state["rounds"][r - 1]:
            target = {
                "epochs": train_state["epoch"] + cfg.epochs,
                "minutes": (train_state["seconds"] / 60 + cfg.minutes) if cfg.minutes is not None else None,
            }
            state["rounds"][r - 1]["target"] = target
            write_json(state_path, state)
        target = state["rounds"][r - 1]["target"]
        # training goes on in the run folder given, wherever it was trained (TrainConfig.moved_to), on its rollouts too
        tc = tc.moved_to(run)
        data = tc.data + ([str(data_dir)] if str(data_dir) not in tc.data else [])
        tc = TrainConfig.from_dict({**asdict(tc), "data": data, "epochs": target["epochs"] or 10**9, "minutes": target["minutes"]})
        saved["train"] = asdict(tc)
        write_json(config_path, saved)
        # best weights from this round's training on (the validation episodes are expert-driven,
        # so the pre-round weights would often stay "best" and the round would change nothing)
        first_time = not state["rounds"][r - 1].get("best_restarted")
        state["rounds"][r - 1]["best_restarted"] = True
        write_json(state_path, state)
        metrics = train(tc, resume=True, quiet=quiet, restart_best=first_time)
        keep_round_weights(run, r)
        state["rounds"][r - 1].update(trained=True, rollout_mean_return=float(np.mean(returns)), best=metrics.get("best"),
                                      expert_share=float(np.mean([e.get("expert_share", math.nan) for e in done])))
        state["rounds"][r - 1]["clean_mean_return"] = clean_mean_return(done, seeds)
        perturbed = [e["return"] for e in done if e.get("perturb")]
        if perturbed:  # the rollouts driven under the perturbation, apart
            state["rounds"][r - 1]["perturbed_mean_return"] = float(np.mean(perturbed))
        write_json(state_path, state)
        saved = json.loads(config_path.read_text())
    if cfg.select == "check":
        select_by_check(cfg, run, state, r)
    elif state.pop("selected", None) is not None:
        write_json(state_path, state)
    if cfg.average > 1 and r >= 3:
        state["average"] = list(range(max(2, r - cfg.average + 1), r + 1))
        write_json(state_path, state)  # first: a job stopped before the mean is written restores the round's own weights anyway
        average_rounds(run, state["average"])
    elif state.pop("average", None) is not None:
        write_json(state_path, state)
    return state
