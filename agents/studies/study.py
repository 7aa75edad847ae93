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
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from filelock import FileLock, Timeout

from agents.carracing import perturb, scenarios
from agents.training.collect import CollectConfig, DemosRecipe, collect
from agents.training.dagger import dagger
from agents.carracing.env import RENDERER
from agents.evaluation.evaluate import DriveJob, EvaluateConfig, describe_run, drive
from agents.driving.executor import RayExecutor, WorkItem, make_executor
from agents.evaluation.expert_eval import ExpertEvalConfig, evaluate_expert
from agents.driving.rollout import EpisodeResult
from agents.studies.grid import CLEAN, StudyConfig
from agents.studies.progress import Progress
from agents.training.recipe import Recipe
from agents.training.retrain import train_attempts
from agents.studies.store import EXPERT, StudyFile
from agents.training.trainers import train
from agents.training.loop import TrainConfig
from datasets.demos import DemoSet
from nac.checkpoint import read_json
from nac.config import ConfigError, TrainingDiverged, need


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

    def train_once(folder: Path, seed: int) -> None:
        if not (folder / "dagger.json").is_file():  # behaviour cloning is over once DAgger has begun
            train_resumable(recipe.train_config(job["demos"], str(folder), job["head"], seed, max_steps=job["max_steps"], device=job.get("device", "auto"),
                                                continuous=job["continuous"]))
        if recipe.dagger.rounds:
            dagger(recipe.dagger_config(str(folder), job["expert"], seed, max_steps=job["max_steps"]), quiet=True)

    with quiet_bars():
        guard = train_attempts(recipe.retrain, run, job["seed"], train_once, max_steps=job["max_steps"])
    dag = read_json(run / "dagger.json") if recipe.dagger.rounds else {"rounds": []}
    metrics = read_json(run / "metrics.json")
    best = metrics.get("best") or {}
    checks = [dag.get("bc_check")] + [r.get("check") for r in dag["rounds"]] if dag["rounds"] else []
    return {
        "path": str(run),
        "train_seconds": metrics.get("train_seconds"),
        "wall_seconds": round(time.monotonic() - started, 1),
        "val_loss": best.get("val_loss"),
        "val_accuracy": best.get("val_accuracy"),
        "dagger_rollout_returns": [r.get("rollout_mean_return") for r in dag["rounds"]],
        # what the checks saw, behaviour cloning's weights (round 0) then each round's (None: not checked), and the round whose
        # weights the run left (None: the last round's, or a mean)
        "dagger_check_returns": [c["mean_return"] if c else None for c in checks],
        "dagger_check_worst": [min(c["returns"]) if c else None for c in checks],
        "dagger_check_skips": [sum(1 for n in c["skipped"] if n) if c and "skipped" in c else None for c in checks],  # episodes that
        # skipped a tile (None: not checked, or a check kept before the counts were)
        "dagger_selected": dag.get("selected"),
        **({"retrain_selection": [a["selection"]["mean_return"] for a in guard["attempts"]], "retrain_chosen": guard["chosen"]} if guard else {}),
        # with the retrain guard: each attempt's mean return on the selection tracks, and the attempt the run kept (0: the first)
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


def cpu_timed(job: tuple[Callable[[Any], Any], Any]) -> tuple[Any, float]:
    """A task (fn, arg) -> (fn(arg), the CPU seconds its process and the children it waited for spent on it): what each
    run and episode of a study cost, summed by the report. A task cut short by a stop is not counted."""
    fn, arg = job
    before = process_cpu_seconds()
    result = fn(arg)
    return result, round(process_cpu_seconds() - before, 2)


def process_cpu_seconds() -> float:
    """User + system CPU time of this process (every thread) and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


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


@dataclass(frozen=True)
class StudyKind:
    """What differs between a CarRacing study and a Udacity one; the grid, resume, scheduling and
    study.json are shared. `train` and `episode` run as executor tasks (module-level functions)."""

    record: Callable[[StudyConfig, DemosRecipe], None]  # the shared demonstrations recorded so into cfg.demos_dir(recipe), resumable
    train: Callable[[dict[str, Any]], dict[str, Any]]  # one run to its end -> its figures
    episodes: Callable[[Any], list[dict[str, Any]]]  # a run's held-out episodes at one level -> per seed, in order: return, length,
    # lap_finished, tiles, skipped, step_ms_p50
    episode_job: Callable[[StudyConfig, str, str, tuple[int, ...]], Any]  # (cfg, run folder, level, seeds) -> episodes' argument
    batch: int  # seeds per episodes task
    training_seeds: Callable[[str], list[int]]  # the tracks a run folder was trained on


def _record_demos(cfg: StudyConfig, recipe: DemosRecipe) -> None:
    demos = cfg.demos_dir(recipe)
    have = len(DemoSet(demos).episodes) if (demos / "manifest.json").is_file() else 0
    if have < cfg.demos:
        collect(CollectConfig(
            out=str(demos), expert=cfg.expert, episodes=cfg.demos, continuous=cfg.continuous, workers=cfg.workers,
            ray=cfg.ray, resume=(demos / "manifest.json").is_file(), max_steps=cfg.max_steps, **recipe.to_dict(),
        ))


CARRACING = StudyKind(
    record=_record_demos, train=train_run, episodes=eval_episodes,
    episode_job=lambda cfg, path, level, seeds: (path, cfg.continuous, cfg.max_steps, level, seeds),
    training_seeds=lambda path: describe_run(path, "best").training_seeds, batch=EPISODE_BATCH,
)


def run_study(cfg: StudyConfig, quiet: bool = False, kind: StudyKind | None = None) -> dict[str, Any]:
    """Run (or continue) the study; returns study.json's content. Ctrl-C keeps everything finished.
    kind: CARRACING by default; a udacity study passes sim_bridge.udacity_runs.UDACITY (agents cannot
    import the bridge)."""
    if kind is None:
        need(cfg.task == "carracing", f"a {cfg.task} study needs its StudyKind (sim_bridge.udacity_runs.UDACITY for udacity)")
        kind = CARRACING
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):
        return _run_study(cfg, quiet, kind)


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """The study folder held by this process alone: two studies on one folder would train the same run twice at once and
    overwrite each other's study.json. The operating system lets go of the lock when the process ends, however it ends."""
    lock = FileLock(out / "study.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(f"another study is running in {out} (it holds {out / 'study.lock'}): wait for it to end or stop it, "
                          "then run the command again to continue") from None
    try:
        yield
    finally:
        lock.release()


def _run_study(cfg: StudyConfig, quiet: bool, kind: StudyKind) -> dict[str, Any]:
    study = StudyFile(cfg)
    study.save()

    # 1. one demonstration set per way the recipes record them, recorded once (and only if a run on it still needs training)
    runs = cfg.runs()

    def entry(run: dict[str, Any]) -> dict[str, Any]:
        """The run's record in study.json ({} before it is trained)."""
        return study.data["runs"].get(run["key"], {})

    def demos(run: dict[str, Any]) -> DemosRecipe:
        return study.recipe(run["variant"]).demos

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
    for way in {cfg.demos_dir(demos(r)): demos(r) for r in runs if not entry(r).get("done")}.values():
        kind.record(cfg, way)

    # 2. the task list: training runs not finished, episodes not driven
    seeds = cfg.eval_seeds()
    executor = make_executor(cfg.executor(shared=(cfg.out,)))
    ray_gpus = executor.gpus_available() if isinstance(executor, RayExecutor) else 0.0
    capacity = executor.capacity

    def episode_tasks(run: dict[str, Any]) -> list[WorkItem]:
        path = str(cfg.run_dir(run["key"]))
        todo: dict[str, list[int]] = {}
        for level, s in missing(run):
            todo.setdefault(level, []).append(s)
        chunks = [(level, tuple(seeds[k:k + kind.batch])) for level, seeds in todo.items() for k in range(0, len(seeds), kind.batch)]
        return [WorkItem(("episodes", run["key"], level, chunk), cpu_timed, (kind.episodes, kind.episode_job(cfg, path, level, chunk)))
                for level, chunk in chunks]

    def train_task(run: dict[str, Any]) -> WorkItem:
        job = {
            "path": str(cfg.run_dir(run["key"])), "demos": str(cfg.demos_dir(demos(run))), "head": run["head"], "seed": run["seed"],
            "recipe": study.data["recipes"][run["variant"]], "expert": cfg.expert, "max_steps": cfg.max_steps, "continuous": cfg.continuous,
            # the GPU where there is one: a Ray task is given one; local workers share this machine's (auto: else the CPU)
            "device": "cuda" if ray_gpus else "auto",
        }
        return WorkItem(("train", run["key"]), cpu_timed, (train_guarded, (kind.train, job)), cpus=1, gpus=1 if ray_gpus else 0)

    ready_eval: list[WorkItem] = []
    ready_train: list[WorkItem] = []
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
        WorkItem(("expert", level, s), cpu_timed, (_expert_episode, (cfg.expert, cfg.continuous, cfg.max_steps, level, s)))
        for level in expert_levels(cfg) for s in seeds if ("expert", level, s) not in study.keys
    ]
    ready_eval = expert_tasks + ready_eval

    asked = {(r["key"], level, s) for r in runs if not entry(r).get("diverged") for level in cfg.levels for s in cfg.eval_seeds(level)}
    asked |= {(EXPERT, level, s) for level in expert_levels(cfg) for s in seeds}
    progress = Progress(study, [r["key"] for r in runs], asked, capacity, quiet)
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
            key, (result, cpu) = executor.next_result()
            running.pop(key, None)
            what = key[0]
            if what == "train":
                run = next(r for r in runs if r["key"] == key[1])
                study.data["runs"][run["key"]] = {**run, **result, "cpu_seconds": cpu, "done": True}
                progress.trained(result["wall_seconds"])
                if result.get("diverged"):
                    progress.diverged(f"{run['key']}: {result['diverged']}", run["key"])
                else:
                    _check_not_trained_on(cfg, run, kind)
                    ready_eval.extend(episode_tasks(run))
            elif what == "expert":
                if study.add_episode({"run": EXPERT, "variant": "-", "head": EXPERT, "seed": 0, "level": key[1], "episode_seed": key[2], **result,
                                      "cpu_seconds": cpu}):
                    progress.driven()
            else:
                run = study.data["runs"][key[1]]
                for seed, record in zip(key[3], result):  # the task's CPU time shared by its episodes
                    if study.add_episode({"run": key[1], "variant": run["variant"], "head": run["head"], "seed": run["seed"], "level": key[2],
                                          "episode_seed": seed, **record, "cpu_seconds": round(cpu / len(result), 2)}):
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

