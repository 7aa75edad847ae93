"""Studies: every comparison from several training runs, stated with the statistics of Agarwal et
al. 2021 ("Deep RL at the Edge of the Statistical Precipice", the `rliable` package).

A study is a grid: variants (recipes) x heads x training seeds. It records one demonstration set
and shares it, trains every run by its variant's recipe (behaviour cloning, then DAgger, as
agents/pretrained/README.md does), and drives every finished run on the same held-out seeds at
every perturbation level. It sits above training and evaluation: it calls them, they never know it.

Everything lands in OUT/study.json as it finishes (every episode's return, keyed by run, level and
seed, so nothing is counted twice), and a study run again continues where it stopped: finished
runs and finished episodes are never redone; an unfinished training run resumes from its own
resumable state. Training runs and episodes are tasks on the executor (local processes, or Ray).
The report (agents.studies.report) is rebuilt from study.json alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from tqdm import tqdm

from agents.carracing import perturb

from agents.carracing import scenarios
from agents.training.bc import frame_gaps, net_config
from agents.training.collect import CollectConfig, collect
from agents.training.dagger import FIRST_SEED, DaggerConfig, dagger
from agents.carracing.env import EPISODE_STEPS, RENDERER
from agents.carracing.seeds import HELD_OUT_SEED
from agents.evaluation.evaluate import DriveJob, EvaluateConfig, describe_run, drive
from agents.driving.executor import ExecutorConfig, RayExecutor, Task, make_executor, storage_path
from agents.evaluation.expert_eval import ExpertEvalConfig, evaluate_expert
from agents.driving.rollout import EpisodeResult
from agents.studies.report import UDACITY_FIELDS
from agents.training.tasks import train
from agents.training.loop import TrainConfig
from datasets.demos import DemoSet
from nac.checkpoint import write_json
from nac.config import ConfigDict, ConfigError, TrainingDiverged, need
from nac.heads import HEADS
from nac.pilotnet import DENSE

FORMAT = "nacdrive-study/1"
STUDY_FILE = "study.json"
CLEAN = perturb.CLEAN
TASKS = ("carracing", "udacity")


@dataclass
class Recipe(ConfigDict):
    """How one run is trained; the defaults are agents/pretrained/README.md's recipe."""

    WHAT = "recipe fields"

    epochs: int = 4  # behaviour-cloning epochs on the demonstrations
    dagger_rounds: int = 2  # DAgger rounds after it (0: pure behaviour cloning)
    dagger_until: float = 0.0  # > 0: then one more round while the last round's rollouts or trained weights average below this return or lose a track (dagger --until) ...
    dagger_check: int = DaggerConfig.check  # ... driving this many alone (dagger --check; 0: the rollouts alone) ...
    dagger_max_rounds: int = 0  # ... up to this many rounds in all (dagger --max-rounds)
    dagger_episodes: int = 10  # policy rollouts per round, labelled by the expert
    dagger_epochs: int = 2  # training epochs after each round
    dagger_average: int = DaggerConfig.average  # > 1: the run's weights are the mean of its last K rounds' own, from round 2 on (dagger --average)
    dagger_beta: float | None = DaggerConfig.beta  # round r executes the expert's action with probability beta ** r; None: the
    # recipe's for each head (agents.training.dagger.recipe_beta)
    dagger_off_road: int = DaggerConfig.off_road_steps  # > 0: a DAgger rollout ends once the car has been off the road this many steps in a row
    dagger_takeover: float = DaggerConfig.takeover  # > 0: the expert takes over a DAgger rollout while the car is this many u/s too fast or off the road (dagger --takeover)
    dagger_perturb: str = DaggerConfig.perturb  # the policy drives half the DAgger rollouts under this perturbation (dagger --perturb; auto: the run's frame gaps)
    window: int = 8  # frames per window
    stride_jitter: int | None = None  # > 1: windows with irregular frame gaps 1..J (true timestamps kept) ...
    regular_share: float | None = None  # ... except this share of them; None: the recipe's for the head (agents.training.bc.frame_gaps)
    arrival_windows: bool = False  # DAgger rows a perturbed policy decided on train on the windows it saw (train --arrival-windows)
    shift: int = 0  # random image shifts of up to this many pixels (train --shift)
    augment: str = "none"  # an augmentation against visual shift (train --augment; agents.training.augment)
    select_episodes: int = 0  # > 0: best weights by closed-loop return over this many episodes (train --select-episodes)
    lr: float = 1e-4  # Adam learning rate
    ema: float = 0.0  # > 0: keep and judge a moving average of the weights, this decay per step (train --ema)
    batch_size: int = 32
    loss: str = "mse"  # continuous actions: "mse" or "l1" (agents.training.bc.loss_terms)
    balance: str = "auto"  # class imbalance (train --balance): auto = weighted loss for discrete actions, none for continuous
    turn_weight: float = 0.0  # wheel-angle networks: the angle's error weighted where the expert's plan turns fast (train --turn-weight)
    val_fraction: float = 0.2  # share of the demonstrations held out for validation (the paper's CarRacing split: 0.1)
    noise: float = 0.0  # DART: std of the steering drift in the demonstrations (collect --noise); each value is its own set
    net: dict[str, Any] = field(default_factory=dict)  # more network options, e.g. {"use_time": false, "nac": {"mode": "euler"}}

    def __post_init__(self) -> None:
        need(self.dagger_rounds >= 0, f"dagger_rounds must be >= 0 (got {self.dagger_rounds})")
        need(isinstance(self.net, dict), "net must be a JSON object of network options")
        need(0.0 <= self.noise <= 1.0, f"noise must be in [0, 1] (got {self.noise})")
        # every other field is checked where it is used, with that config's own messages
        self.train_config("<demos>", "<run>", head="nac", seed=0)
        if self.dagger_rounds:
            try:
                self.dagger_config("<run>", expert="track", seed=0)
            except ConfigError as e:  # its fields are dagger_* here
                raise ConfigError(f"the DAgger rounds' {e}") from None

    def train_config(self, demos: str, out: str, head: str, seed: int, task: str = "carracing", max_steps: int = EPISODE_STEPS, device: str = "auto",
                     continuous: bool = True) -> TrainConfig:
        """The behaviour cloning of one run by this recipe (a PilotNet run takes UDACITY_FIELDS)."""
        common: dict[str, Any] = dict(data=[demos], out=out, task=task, head=head, epochs=self.epochs, lr=self.lr, ema=self.ema, batch_size=self.batch_size,
                                      val_fraction=self.val_fraction, seed=seed, device=device)
        if task == "udacity":
            return TrainConfig(**common, net=dict(self.net))
        return TrainConfig(**common, window=self.window, **frame_gaps(head, continuous, self.stride_jitter, self.regular_share), shift=self.shift, augment=self.augment,
                           arrival_windows=self.arrival_windows,
                           select_episodes=self.select_episodes, select_steps=max_steps, loss=self.loss, balance=self.balance, turn_weight=self.turn_weight,
                           net={"use_time": True, **self.net})

    def dagger_config(self, run: str, expert: str, seed: int, max_steps: int = EPISODE_STEPS) -> DaggerConfig:
        """This recipe's DAgger rounds after the behaviour cloning of one run (one rollout process)."""
        return DaggerConfig(run=run, expert=expert, rounds=self.dagger_rounds, until=self.dagger_until, check=self.dagger_check, max_rounds=self.dagger_max_rounds, episodes=self.dagger_episodes, beta=self.dagger_beta,
                            epochs=self.dagger_epochs, average=self.dagger_average, workers=1, max_steps=max_steps, off_road_steps=self.dagger_off_road,
                            takeover=self.dagger_takeover, perturb=self.dagger_perturb, seed_start=FIRST_SEED + seed * 1000)  # each training seed has its own rollouts


# Recipe's defaults until study.json stored each variant's whole recipe: what the runs of a study
# written before then were trained by, whatever the defaults are now
LEGACY_RECIPE: dict[str, Any] = {
    "epochs": 4, "dagger_rounds": 2, "dagger_episodes": 10, "dagger_epochs": 2, "dagger_beta": 0.5, "dagger_off_road": 0, "dagger_perturb": "none", "arrival_windows": False, "window": 8,
    "stride_jitter": 1, "regular_share": 0.0, "shift": 0, "select_episodes": 0, "lr": 1e-4, "ema": 0.0, "batch_size": 32, "loss": "mse",
    "balance": "auto", "val_fraction": 0.2, "noise": 0.0, "net": {},
}


# Recipe fields added after studies began storing whole recipes, with the value that means what a stored recipe
# without them was trained by (a field whose default is not the old behaviour must be named here), or a function of the
# stored recipe giving it: DAgger's check changed what dagger_until judges, and means nothing without it, so a study that
# never used until continues under today's default
ADDED_FIELDS: dict[str, Any] = {"dagger_perturb": "none", "arrival_windows": False, "augment": "none",
                                "dagger_check": lambda recipe: 0 if recipe.get("dagger_until") else DaggerConfig.check}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """'bc:dagger_rounds=0' -> ("bc", {"dagger_rounds": 0}); 'euler:net.nac.mode=euler' sets a
    nested network option; values are JSON where they parse ('true', '3'), text otherwise."""
    name, _, spec = text.partition(":")
    need(bool(name) and name.replace("-", "").replace("_", "").isalnum(), f"a variant is NAME[:KEY=VALUE,...] with a plain name (got {text!r})")
    overrides: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, sep, raw = item.partition("=")
        need(bool(sep and key), f"variant {name!r}: expected KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *path, last = key.split(".")
        allowed = [f.name for f in fields(Recipe)]
        need(path[:1] == ["net"] or (not path and key in allowed), f"variant {name!r}: unknown recipe field {key!r}; allowed: {allowed} (net.* for network options)")
        node = overrides
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    Recipe.from_dict(overrides)  # check the values now, with the recipe's own messages
    return name, overrides


@dataclass
class StudyConfig:
    """A study's grid and how its runs are trained and evaluated (saved in study.json)."""

    out: str  # the study folder (demos/, runs/, study.json, report/)
    task: str = "carracing"  # "carracing": the driving network in CarRacing; "udacity": PilotNet through the bridge
    heads: list[str] = field(default_factory=lambda: ["nac", "lstm"])  # sequence heads (nac.heads.head_names())
    seeds: int = 3  # training seeds per head and variant: first_seed .. first_seed + seeds - 1
    first_seed: int = 0
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"base": {}})  # name -> recipe overrides
    demos: int = 50  # expert demonstrations (seeds 0 .. demos - 1), recorded once and shared
    continuous: bool = True  # continuous actions; False: the 5 discrete ones
    expert: str = "track"  # who demonstrates and labels DAgger rollouts
    episodes: int = 50  # held-out episodes per run at the clean level
    perturb_episodes: int | None = None  # per run at each level with a perturbation: the first ones of those seeds (None: episodes)
    seed_start: int = HELD_OUT_SEED  # held-out seeds seed_start ..
    levels: list[str] = field(default_factory=lambda: [CLEAN])  # conditions: "none" (clean), a scenario (agents.carracing.scenarios), a
    # perturbation (agents.carracing.perturb) or SCENARIO+PERTURBATION (agents.carracing.perturb.parse_level)
    max_steps: int = EPISODE_STEPS  # steps per episode
    workers: int = 0  # local processes; 0 = up to 2
    ray: str | None = None  # Ray cluster address, or "local"; None: local processes
    speed: float | None = None  # udacity: the bridge's target speed, mph (drive --speed); None: the run's learned speed, else 15
    turn_slowdown: float = 0.5  # udacity: the share by which a fixed target drops at full steering lock (drive --turn-slowdown)

    def __post_init__(self) -> None:
        self.out = storage_path(self.out, self.ray)
        need(self.task in TASKS, f"task must be one of {', '.join(TASKS)} (got {self.task!r})")
        need(bool(self.heads), "give at least one head")
        allowed = [*HEADS, DENSE] if self.task == "udacity" else list(HEADS)
        unknown = [h for h in self.heads if h not in allowed]
        need(not unknown, f"unknown heads {unknown}; choose from {', '.join(allowed)}")
        if self.task == "udacity":
            need(self.continuous and self.expert == "track", "udacity studies record the continuous track expert (no --discrete)")
            need(self.levels == [CLEAN], "udacity studies drive clean through the bridge (no --perturb)")
            for name, overrides in self.variants.items():
                extra = sorted(set(overrides) - UDACITY_FIELDS)
                need(not extra, f"variant {name!r}: {', '.join(extra)} not a recipe field of PilotNet runs (udacity: {', '.join(sorted(UDACITY_FIELDS))})")
            need(self.speed is None or 0 < self.speed <= 40, f"speed must be in (0, 40] mph (got {self.speed})")
            need(0 <= self.turn_slowdown < 1, f"turn slowdown must be in [0, 1) (got {self.turn_slowdown})")
        need(len(set(self.heads)) == len(self.heads), "a head is given twice")
        need(self.seeds >= 1 and self.first_seed >= 0, "seeds must be >= 1 and first_seed >= 0")
        need(bool(self.variants), "give at least one variant")
        for name, overrides in self.variants.items():
            recipe = Recipe.from_dict(overrides)
            need(self.continuous or not recipe.noise, f"variant {name!r}: noise (DART) drifts the steering of continuous actions; drop --discrete or the noise")
            if self.task == "carracing":  # its network for every head, checked now rather than in a training worker
                for h in self.heads:
                    try:
                        net_config(recipe.train_config("<demos>", "<run>", head=h, seed=0, continuous=self.continuous), "continuous" if self.continuous else "discrete")
                    except ConfigError as e:
                        raise ConfigError(f"variant {name!r} with head {h}: {e}") from None
        need(self.demos >= 2, f"demos must be >= 2 (one episode is held out for validation; got {self.demos})")
        need(self.episodes >= 1, f"episodes must be >= 1 (got {self.episodes})")
        need(self.perturb_episodes is None or 1 <= self.perturb_episodes <= self.episodes,
             f"perturb-episodes must be in 1..episodes ({self.episodes}; got {self.perturb_episodes})")
        need(self.seed_start >= self.demos, f"seed-start must be >= {self.demos}: the held-out seeds may not be demonstration seeds")
        need(self.seed_start + self.episodes <= FIRST_SEED, f"held-out seeds must stay below {FIRST_SEED} (DAgger's rollout seeds)")
        need(bool(self.levels), "give at least one level")
        for level in self.levels:
            perturb.parse_level(level)
        need(len(set(self.levels)) == len(self.levels), "a level is given twice")
        need(self.max_steps >= 1, "max_steps must be >= 1")

    def runs(self) -> list[dict[str, Any]]:
        """Every run of the grid, seed-major: the first seed of every head comes first, so that
        an interrupted study has comparable runs of every head rather than all runs of one."""
        return [
            {"key": f"{v}/{h}/seed{s}", "variant": v, "head": h, "seed": s}
            for s in range(self.first_seed, self.first_seed + self.seeds)
            for v in self.variants
            for h in self.heads
        ]

    def eval_seeds(self, level: str = CLEAN) -> list[int]:
        n = self.episodes if perturb.parse_level(level).perturbation is None or self.perturb_episodes is None else self.perturb_episodes
        return list(range(self.seed_start, self.seed_start + n))

    def demos_dir(self, noise: float = 0.0) -> Path:
        """The demonstrations of runs whose recipe has this steering noise (DART): one set per value."""
        return Path(self.out) / ("demos" if not noise else f"demos-noise{noise:g}")

    def run_dir(self, key: str) -> Path:
        return Path(self.out) / "runs" / key


@contextlib.contextmanager
def quiet_bars() -> Iterator[None]:
    """No progress bars from the training, DAgger and expert inside a task: their stderr goes to
    /dev/null (a task's failure still arrives as its exception; its figures are in the run folder)."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        yield


def train_resumable(tc: TrainConfig) -> dict[str, Any]:
    """Train tc's run, or resume it from its own state if an earlier attempt was interrupted;
    returns the run's metrics."""
    run = Path(tc.out)
    if (run / "train_state.json").is_file():
        return train(tc, resume=True, quiet=True)
    if run.exists():  # a start that died before its first checkpoint: nothing worth keeping
        shutil.rmtree(run)
    return train(tc, quiet=True)


def train_run(job: dict[str, Any]) -> dict[str, Any]:
    """One training run of the grid, to its end (a task): behaviour cloning, then DAgger, each
    resumed from its own state if an earlier attempt was interrupted. Returns the run's figures."""
    torch.set_num_threads(1)  # one task, one core
    run, recipe = Path(job["path"]), Recipe.from_dict(job["recipe"])
    started = time.monotonic()
    with quiet_bars():
        if not (run / "dagger.json").is_file():  # behaviour cloning is over once DAgger has begun
            train_resumable(recipe.train_config(job["demos"], str(run), job["head"], job["seed"], max_steps=job["max_steps"], device=job.get("device", "auto"),
                                                continuous=job["continuous"]))
        dag: dict[str, Any] = {"rounds": []}
        if recipe.dagger_rounds:
            dag = dagger(recipe.dagger_config(str(run), job["expert"], job["seed"], max_steps=job["max_steps"]), quiet=True)
    metrics = json.loads((run / "metrics.json").read_text())
    best = metrics.get("best") or {}
    return {
        "path": str(run),
        "train_seconds": metrics.get("train_seconds"),
        "wall_seconds": round(time.monotonic() - started, 1),
        "val_loss": best.get("val_loss"),
        "val_accuracy": best.get("val_accuracy"),
        "dagger_rollout_returns": [r.get("rollout_mean_return") for r in dag["rounds"]],
    }


def train_guarded(job: tuple[Callable[[dict[str, Any]], dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """A training task whose loss stopped being finite: its run is a result of the study (reported
    as diverged, never retried, not driven), not a failure that stops the study."""
    train_fn, run_job = job
    started = time.monotonic()
    try:
        return train_fn(run_job)
    except TrainingDiverged as exc:
        return {"path": run_job["path"], "diverged": str(exc), "wall_seconds": round(time.monotonic() - started, 1)}


def eval_episodes(job: tuple[str, bool, int, str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """Held-out episodes of one run at one level (a task), one record per seed in order, driven as
    the run drives by default (agents.driving.policy.default_decoder: argmax, or its own decoder for rate and
    wheel-angle networks); unperturbed ones stepped together, one batched forward a step
    (agents.evaluation.evaluate.drive: each episode the one it would be alone)."""
    path, continuous, max_steps, level, seeds = job
    at = perturb.parse_level(level)
    out = drive(DriveJob(path, "best", None, continuous, max_steps, at.perturbation, RENDERER, at.scenario, tuple(seeds)))
    return [episode_record(result, float(np.percentile(ms, 50)) if ms.size else None) for _, result, ms in out]


EPISODE_BATCH = EvaluateConfig.batch  # a CarRacing study's held-out episodes of one run and level per task


def episode_record(result: EpisodeResult, step_ms_p50: float | None = None) -> dict[str, Any]:
    """One held-out episode as study.json keeps it (every kind of study: policies, experts, the bridge)."""
    return {"return": result.episode_return, "length": result.length, "lap_finished": result.lap_finished,
            "tiles": result.tiles_visited, "skipped": result.tiles_skipped, "step_ms_p50": step_ms_p50}


class StudyFile:
    """study.json: the config, each run's figures, every episode; written atomically on each change."""

    def __init__(self, cfg: StudyConfig) -> None:
        self.path = Path(cfg.out) / STUDY_FILE
        if self.path.is_file():
            self.data = json.loads(self.path.read_text())
            need(self.data.get("format") == FORMAT, f"{self.path} is not a study file ({FORMAT})")
            # a study from before "recipes" was stored: its variants' overrides on the defaults of that time
            self.data.setdefault("recipes", {v: Recipe.from_dict({**LEGACY_RECIPE, **o}).to_dict() for v, o in self.data["config"]["variants"].items()})
            self.data["recipes"] = {v: {**{k: f(r) if callable(f) else f for k, f in ADDED_FIELDS.items()}, **r} for v, r in self.data["recipes"].items()}
            self._check_compatible(cfg)
            self.data["config"] = _merged_config(self.data["config"], asdict(cfg))
        else:
            self.data = {"format": FORMAT, "config": asdict(cfg), "recipes": {}, "runs": {}, "episodes": []}
        for v, overrides in cfg.variants.items():  # every field of every variant's recipe, so that a later change of a default cannot reach its runs
            self.data["recipes"].setdefault(v, Recipe.from_dict(overrides).to_dict())
        # the runs asked for by every command that grew the study (not always every head x variant x seed of the merged config)
        self.data["asked"] = list(dict.fromkeys([*self.data.get("asked", list(self.data["runs"])), *(r["key"] for r in cfg.runs())]))
        self.keys = {self.episode_key(e) for e in self.data["episodes"]}

    def recipe(self, variant: str) -> Recipe:
        """The recipe a variant's runs are trained by: as stored when the variant entered the study."""
        return Recipe.from_dict(self.data["recipes"][variant])

    def _check_compatible(self, cfg: StudyConfig) -> None:
        """A study may grow (heads, seeds, episodes, levels, variants) but not change what its
        finished runs were trained and evaluated with."""
        old = self.data["config"]
        for name in ("task", "demos", "continuous", "expert", "seed_start", "max_steps", *(("speed", "turn_slowdown") if cfg.task == "udacity" else ())):
            was = old.get(name, StudyConfig.__dataclass_fields__[name].default)  # fields added later: their default
            need(was == getattr(cfg, name), f"{self.path} was made with {name}={was!r}, not {getattr(cfg, name)!r}; use another --out")
        for v, overrides in cfg.variants.items():
            if v in self.data["recipes"]:
                was, now = self.recipe(v).to_dict(), Recipe.from_dict(overrides).to_dict()
                differ = [f"{k}={was[k]!r} (asked: {now[k]!r})" for k in was if was[k] != now[k]]
                need(not differ, f"variant {v!r} in {self.path} was trained with {', '.join(differ)}: pass those values in --variant "
                                 f"to continue it, or give the new recipe another name")

    @staticmethod
    def episode_key(e: dict[str, Any]) -> tuple[str, str, int]:
        return e["run"], e["level"], e["episode_seed"]

    def forget(self, key: str) -> None:
        """Drop a run and its episodes (it will be trained and driven again)."""
        self.data["runs"].pop(key, None)
        self.data["episodes"] = [e for e in self.data["episodes"] if e["run"] != key]
        self.keys = {self.episode_key(e) for e in self.data["episodes"]}

    def add_episode(self, e: dict[str, Any]) -> bool:
        key = self.episode_key(e)
        if key in self.keys:
            return False  # a retried task's second answer: never counted twice
        self.keys.add(key)
        self.data["episodes"].append(e)
        return True

    def save(self) -> None:
        write_json(self.path, self.data)


def _merged_config(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The grid as it now stands: the union of what was asked in every invocation."""
    merged = dict(new)
    merged["heads"] = list(dict.fromkeys(old["heads"] + new["heads"]))
    merged["variants"] = {**old["variants"], **new["variants"]}
    merged["levels"] = list(dict.fromkeys(old["levels"] + new["levels"]))
    merged["seeds"] = max(old["first_seed"] + old["seeds"], new["first_seed"] + new["seeds"]) - min(old["first_seed"], new["first_seed"])
    merged["first_seed"] = min(old["first_seed"], new["first_seed"])
    merged["episodes"] = max(old["episodes"], new["episodes"])
    merged["perturb_episodes"] = max(old.get("perturb_episodes") or old["episodes"], new["perturb_episodes"] or new["episodes"])
    return merged


@dataclass(frozen=True)
class StudyKind:
    """What differs between a CarRacing study and a Udacity one; the grid, resume, scheduling and
    study.json are shared. `train` and `episode` run as executor tasks (module-level functions)."""

    record: Callable[[StudyConfig, float], None]  # the shared demonstrations at a steering noise into cfg.demos_dir(noise), resumable
    train: Callable[[dict[str, Any]], dict[str, Any]]  # one run to its end -> its figures
    episodes: Callable[[Any], list[dict[str, Any]]]  # a run's held-out episodes at one level -> per seed, in order: return, length,
    # lap_finished, tiles, skipped, step_ms_p50
    episode_job: Callable[[StudyConfig, str, str, tuple[int, ...]], Any]  # (cfg, run folder, level, seeds) -> episodes' argument
    batch: int  # seeds per episodes task
    training_seeds: Callable[[str], list[int]]  # the tracks a run folder was trained on


def _record_demos(cfg: StudyConfig, noise: float) -> None:
    demos = cfg.demos_dir(noise)
    have = len(DemoSet(demos).episodes) if (demos / "manifest.json").is_file() else 0
    if have < cfg.demos:
        collect(CollectConfig(
            out=str(demos), expert=cfg.expert, episodes=cfg.demos, continuous=cfg.continuous, workers=cfg.workers,
            ray=cfg.ray, resume=(demos / "manifest.json").is_file(), max_steps=cfg.max_steps, noise=noise,
        ))


CARRACING = StudyKind(
    record=_record_demos, train=train_run, episodes=eval_episodes,
    episode_job=lambda cfg, path, level, seeds: (path, cfg.continuous, cfg.max_steps, level, seeds),
    training_seeds=lambda path: describe_run(path, "best").training_seeds, batch=EPISODE_BATCH,
)


def run_study(cfg: StudyConfig, quiet: bool = False, kind: StudyKind | None = None) -> dict[str, Any]:
    """Run (or continue) the study; returns study.json's content. Ctrl-C keeps everything finished.
    kind: CARRACING by default; a udacity study passes sim_bridge.study.UDACITY (agents cannot
    import the bridge)."""
    if kind is None:
        need(cfg.task == "carracing", f"a {cfg.task} study needs its StudyKind (sim_bridge.study.UDACITY for udacity)")
        kind = CARRACING
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    study = StudyFile(cfg)
    study.save()

    # 1. one demonstration set per steering noise of the recipes, recorded once (and only if a run on it still needs training)
    runs = cfg.runs()

    def entry(run: dict[str, Any]) -> dict[str, Any]:
        """The run's record in study.json ({} before it is trained)."""
        return study.data["runs"].get(run["key"], {})

    def noise(run: dict[str, Any]) -> float:
        return study.recipe(run["variant"]).noise

    def missing(run: dict[str, Any]) -> list[tuple[str, int]]:
        """The (level, seed) episodes of a run not recorded yet."""
        return [(level, s) for level in cfg.levels for s in cfg.eval_seeds(level) if (run["key"], level, s) not in study.keys]

    for run in runs:  # a finished run with episodes still to drive and no weights here (study.json moved without it)
        weights = (cfg.run_dir(run["key"]) / "best.safetensors").is_file()
        if entry(run).get("done") and not entry(run).get("diverged") and missing(run) and not weights:
            # is trained again; its recorded episodes go, since they came from weights that no longer exist
            print(f"{run['key']}: its weights are not in {cfg.run_dir(run['key'])} and it has episodes to drive: training it again", flush=True)
            study.forget(run["key"])
    study.save()
    for level in sorted({noise(r) for r in runs if not entry(r).get("done")}):
        kind.record(cfg, level)

    # 2. the task list: training runs not finished, episodes not driven
    seeds = cfg.eval_seeds()
    executor = make_executor(ExecutorConfig(cfg.workers, cfg.ray, shared=(cfg.out,)))
    ray_gpus = executor.gpus_available() if isinstance(executor, RayExecutor) else 0.0
    capacity = executor.capacity

    def episode_tasks(run: dict[str, Any]) -> list[Task]:
        path = str(cfg.run_dir(run["key"]))
        todo: dict[str, list[int]] = {}
        for level, s in missing(run):
            todo.setdefault(level, []).append(s)
        chunks = [(level, tuple(seeds[k:k + kind.batch])) for level, seeds in todo.items() for k in range(0, len(seeds), kind.batch)]
        return [Task(("episodes", run["key"], level, chunk), kind.episodes, kind.episode_job(cfg, path, level, chunk)) for level, chunk in chunks]

    def train_task(run: dict[str, Any]) -> Task:
        job = {
            "path": str(cfg.run_dir(run["key"])), "demos": str(cfg.demos_dir(noise(run))), "head": run["head"], "seed": run["seed"],
            "recipe": study.data["recipes"][run["variant"]], "expert": cfg.expert, "max_steps": cfg.max_steps, "continuous": cfg.continuous,
            "device": "cuda" if ray_gpus else "cpu",
        }
        return Task(("train", run["key"]), train_guarded, (kind.train, job), cpus=1, gpus=1 if ray_gpus else 0)

    ready_eval: list[Task] = []
    ready_train: list[Task] = []
    for run in runs:
        if entry(run).get("diverged"):
            continue  # reported as such; nothing to drive
        if entry(run).get("done"):
            tasks = episode_tasks(run)
            if tasks:  # a finished run with every episode recorded needs nothing more, not even its folder
                _check_not_trained_on(cfg, run, kind)
                ready_eval += tasks
        else:
            ready_train.append(train_task(run))
    expert_tasks = [  # the expert reads the car's state: it drives each scenario of the levels (clean included), never perturbed
        Task(("expert", level, s), _expert_episode, (cfg.expert, cfg.continuous, cfg.max_steps, level, s))
        for level in expert_levels(cfg) for s in seeds if ("expert", level, s) not in study.keys
    ]
    ready_eval = expert_tasks + ready_eval

    total_eps = sum(not entry(r).get("diverged") for r in runs) * sum(len(cfg.eval_seeds(level)) for level in cfg.levels) + len(seeds) * len(expert_levels(cfg))
    progress = _Progress(study, [r["key"] for r in runs], total_eps, capacity, quiet)
    running: dict[Any, str] = {}

    def refill() -> None:
        # episodes of finished runs first: results land early, and a study cut short has them
        while len(running) < capacity and (ready_eval or ready_train):
            task = ready_eval.pop(0) if ready_eval else ready_train.pop(0)
            executor.submit(task)
            running[task.key] = task.key[1] if task.key[0] == "train" else "episodes"

    try:
        refill()
        progress.show(running)
        while executor.pending():
            key, result = executor.next_result()
            running.pop(key, None)
            what = key[0]
            if what == "train":
                run = next(r for r in runs if r["key"] == key[1])
                study.data["runs"][run["key"]] = {**run, **result, "done": True}
                progress.trained(result["wall_seconds"])
                if result.get("diverged"):
                    progress.diverged(f"{run['key']}: {result['diverged']}", len(missing(run)))
                else:
                    _check_not_trained_on(cfg, run, kind)
                    ready_eval.extend(episode_tasks(run))
            elif what == "expert":
                if study.add_episode({"run": "expert", "variant": "-", "head": "expert", "seed": 0, "level": key[1], "episode_seed": key[2], **result}):
                    progress.driven()
            else:
                run = study.data["runs"][key[1]]
                for seed, record in zip(key[3], result):
                    if study.add_episode({"run": key[1], "variant": run["variant"], "head": run["head"], "seed": run["seed"], "level": key[2],
                                          "episode_seed": seed, **record}):
                        progress.driven()
            study.save()
            refill()
            progress.show(running)
    except KeyboardInterrupt:
        executor.cancel()
        study.save()
        raise KeyboardInterrupt(f"{progress.summary()}; run the same command again to continue") from None
    finally:
        executor.close()
        progress.close()
    study.save()
    return study.data


def expert_levels(cfg: StudyConfig) -> list[str]:
    """The levels the expert drives as the reference: "none" and each scenario of the study's levels."""
    return list(dict.fromkeys([CLEAN, *(at.scenario for at in map(perturb.parse_level, cfg.levels) if at.scenario != scenarios.CLEAN)]))


def _expert_episode(job: tuple[str, bool, int, str, int]) -> dict[str, Any]:
    expert, continuous, max_steps, level, seed = job
    scenario = perturb.parse_level(level).scenario
    with quiet_bars():
        r = evaluate_expert(ExpertEvalConfig(expert=expert, continuous=continuous, episodes=1, seed_start=seed, workers=1, max_steps=max_steps,
                                             scenario=scenario))
    return episode_record(EpisodeResult(**r["episodes_detail"][0]))


def _check_not_trained_on(cfg: StudyConfig, run: dict[str, Any], kind: StudyKind) -> None:
    clash = sorted(set(cfg.eval_seeds()) & set(kind.training_seeds(str(cfg.run_dir(run["key"])))))
    if clash:
        raise ConfigError(f"held-out seeds {clash[:3]}... include training episodes of {run['key']}")


class _Progress:
    """Which runs are done and running, episodes driven, and an ETA from the times measured so far."""

    def __init__(self, study: StudyFile, grid: list[str], total_eps: int, capacity: int, quiet: bool) -> None:
        self.study, self.grid, self.total_runs, self.total_eps = study, grid, len(grid), total_eps
        self.capacity = max(1, min(capacity, 64))
        self.train_times: list[float] = []
        self.started = time.monotonic()
        self.eps_at_start = self.episodes_done()
        self.bar = tqdm(total=total_eps, initial=min(total_eps, self.eps_at_start), desc="study episodes", unit="ep", dynamic_ncols=True, disable=quiet)

    def trained(self, seconds: float) -> None:
        self.train_times.append(seconds)

    def driven(self) -> None:
        self.bar.update(1)

    def diverged(self, message: str, episodes: int) -> None:
        """A run that will not be driven: say why, and stop counting its episodes."""
        self.total_eps -= episodes
        self.bar.total = self.total_eps
        tqdm.write(message)

    def runs_done(self) -> int:  # of this grid
        return sum(1 for k in self.grid if self.study.data["runs"].get(k, {}).get("done"))

    def eta_minutes(self) -> float | None:
        eps_done = self.episodes_done() - self.eps_at_start
        elapsed = time.monotonic() - self.started
        runs_left = self.total_runs - self.runs_done()
        if runs_left and not self.train_times:
            return None
        per_run = float(np.mean(self.train_times)) if self.train_times else 0.0
        train_part = sum(self.train_times)
        per_ep = max(0.0, elapsed * self.capacity - train_part) / eps_done if eps_done else 10.0
        left = runs_left * per_run + (self.total_eps - self.episodes_done()) * per_ep
        return left / self.capacity / 60

    def summary(self) -> str:
        return f"runs trained {self.runs_done()}/{self.total_runs}, episodes {self.episodes_done()}/{self.total_eps}"

    def episodes_done(self) -> int:
        """Episodes of this grid (an earlier invocation's other runs are in study.json too)."""
        keep = {*self.grid, "expert"}
        return sum(1 for e in self.study.data["episodes"] if e["run"] in keep)

    def show(self, running: dict[Any, str]) -> None:
        training = sorted(v for v in running.values() if v != "episodes")
        eta = self.eta_minutes()
        self.bar.set_postfix_str(
            f"{self.summary()}; training: {', '.join(training) or '-'}; ETA {'?' if eta is None else f'{eta:.0f} min'}", refresh=True
        )

    def close(self) -> None:
        self.bar.close()
