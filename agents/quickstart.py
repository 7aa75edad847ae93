"""`nacdrive quickstart`: from nothing to a NAC policy driving CarRacing, on a laptop CPU.

Collect demonstrations with the privileged track expert, behaviour-clone a CNN + NAC policy,
DAgger rounds, evaluate on held-out seeds beside the expert, record a video, and write a
report. Every stage
is resumable: running the command again continues where an interruption left it, and a
finished stage is not redone.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.training.trainers import train
from agents.training.loop import CloningRecipe, TrainConfig
from agents.training.collect import CollectConfig, collect
from agents.carracing.env import EPISODE_STEPS
from agents.carracing.seeds import CHECK_SEED, SELECT_SEED, VALIDATION_SEED, track_range
from agents.training.dagger import dagger
from agents.training.dagger_config import DaggerConfig
from agents.training.rounds import check_worst, rollout_returns, selected_weights
from agents.training.recipe import PRESETS, WHEEL_TARGET, Recipe, preset_recipe
from agents.training.retrain import read_state, retrain_summary, train_attempts
from agents.evaluation.evaluate import EvaluateConfig, evaluate, to_markdown, write_leaderboard
from agents.carracing.scenarios import CLEAN, check_scenario
from agents.figures.video import RecordConfig, record_video
from datasets.demos import DemoSet
from nac.checkpoint import read_json, write_json
from nac.config import at_least, check_ranges, need
from nac.heads import head_names


DISCRETE_TARGETS = ("wheel", "rates", "actions")


@dataclass
class QuickstartConfig:
    """The quick start: a recipe preset (agents.training.recipe: quickstart, or quickstart-discrete with --discrete) with
    the user's overrides, and what the job does around it."""

    out: str = "runs/quickstart"  # output folder; everything goes here
    head: str = field(default="nac", metadata={"choices": head_names})  # the sequence head to train
    discrete: bool = False  # 5 discrete actions instead of continuous (steer, gas, brake); the recipe preset quickstart-discrete
    discrete_target: str = field(default="wheel", metadata={"choices": DISCRETE_TARGETS})  # with discrete, what the network learns:
    # wheel, the front-wheel angle the expert plans and its target speed, driven by the pulse that steers the wheels there and
    # braking on the speed bar's speed above the target; rates, each action's rate over the steps t-R..t+R, driven by pulsing at
    # those rates; actions, the expert's action itself, driven by argmax
    rate_window: int = field(default=4, metadata=at_least(1))  # with discrete_target rates: R
    episodes: int | None = field(default=None, metadata=at_least(2))  # expert demonstrations, seeds 1000 x seed.. (default: the preset's, 50; 30 discrete)
    eval_episodes: int = field(default=10, metadata=at_least(1))  # held-out evaluation episodes, seeds eval_seed_start..
    scenarios: list[str] = field(default_factory=list)  # the report also drives the held-out seeds in these generalization
    # scenarios (agents.carracing.scenarios), one leaderboard each beside the clean one
    eval_seed_start: int = VALIDATION_SEED  # the first held-out seed (the validation tracks; agents.carracing.seeds)
    workers: int = 0  # processes for driving; 0: up to 2
    max_steps: int = field(default=EPISODE_STEPS, metadata=at_least(1))  # steps per episode (CarRacing's limit)
    seed: int = 0  # seed of the whole job: demonstrations from seed 1000 x S, training seed S, DAgger rollouts from 1 000 000 + 1000 x S
    recipe: dict[str, Any] = field(default_factory=dict)  # overrides of the preset's recipe (agents.training.recipe.Recipe; flat
    # names or nested by part), resolved to the whole recipe

    @property
    def continuous(self) -> bool:
        return not self.discrete

    @property
    def preset(self) -> str:
        return "quickstart-discrete" if self.discrete else "quickstart"

    def __post_init__(self) -> None:
        check_ranges(self)
        self.recipe = preset_recipe(self.preset, self.recipe).to_dict()  # resolved: quickstart.json keeps what the run was trained by
        if self.episodes is None:
            self.episodes = PRESETS[self.preset].demos
        for name in self.scenarios:
            check_scenario(name)
        need(self.discrete_target in DISCRETE_TARGETS,
             f"discrete_target must be one of {', '.join(DISCRETE_TARGETS)} (got {self.discrete_target!r})")
        self.train_config("<demos>", "<run>")  # its fields are checked now, with training's own messages, before anything runs
        self.dagger_config("<run>")  # and the DAgger rounds' (a bad --dagger-rounds would otherwise fail after the training)
        r = self.trained_by
        first, last = 1000 * self.seed, 1000 * self.seed + self.episodes - 1
        checks = r.dagger.check if r.dagger.until or r.dagger.select == "check" else 0
        selection = max(r.dagger.select_episodes if r.dagger.select == "drive" else 0, r.retrain.episodes if r.retrain.below else 0)
        for what, start, count, advice in (("the held-out seeds", self.eval_seed_start, self.eval_episodes, f"a seed below {self.eval_seed_start // 1000}"),
                                           ("the DAgger check's seeds", CHECK_SEED, checks, "another seed"),
                                           ("the DAgger selection's seeds", SELECT_SEED, selection, "another seed")):
            need(last < start or first >= start + count, f"seed {self.seed} would record demonstrations on seeds {first}..{last}, which include "
                                                         f"{what} {start}..{start + count - 1}; choose {advice}")

    @property
    def trained_by(self) -> Recipe:
        """The recipe, with the discrete target's network: the preset's wheel angle, or the action rates, or the actions."""
        recipe = Recipe.from_dict(self.recipe)
        if self.discrete and self.discrete_target != "wheel":
            net = {k: v for k, v in recipe.bc.net.items() if k not in WHEEL_TARGET["net"]}
            recipe = recipe.changed(balance=CloningRecipe.balance, net={**net, **({"rate_window": self.rate_window} if self.discrete_target == "rates" else {})})
        return recipe

    def dagger_config(self, run: str, seed: int | None = None) -> DaggerConfig:
        """The DAgger rounds of the job (rollout seeds from FIRST_SEED + 1000 * seed), under the job's training seed or an
        attempt's."""
        return self.trained_by.dagger_config(run, "track", self.seed if seed is None else seed, max_steps=self.max_steps, workers=self.workers)

    def train_config(self, data: str, run: str, seed: int | None = None) -> TrainConfig:
        """The behaviour cloning of the job, under the job's training seed or an attempt's."""
        return self.trained_by.train_config(data, run, self.head, self.seed if seed is None else seed, max_steps=self.max_steps,
                                            continuous=self.continuous)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _stage(title: str) -> None:
    print(f"\n== {title}", flush=True)


def quickstart(cfg: QuickstartConfig) -> dict[str, Any]:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    data, run = out / "demos", out / cfg.head
    started = time.monotonic()
    timings: dict[str, float] = {}

    def timed(name: str, t0: float) -> None:
        timings[name] = round(time.monotonic() - t0, 1)

    t0 = time.monotonic()
    _stage(f"1/5 recording {cfg.episodes} demonstrations with the track expert -> {data}")
    resume = (data / "manifest.json").is_file()
    if not resume or len(DemoSet(data).episodes) < cfg.episodes:
        collect(CollectConfig(out=str(data), episodes=cfg.episodes, continuous=cfg.continuous, workers=cfg.workers, resume=resume,
                              max_steps=cfg.max_steps, seed_start=1000 * cfg.seed))
    timed("collect", t0)

    t0 = time.monotonic()
    r = cfg.trained_by
    judge = f"clean rollouts average below {r.dagger.until:g}" + (
        f" or its trained weights, driving {_count(r.dagger.check, 'check episode')}, do or lose a track" if r.dagger.check else "")
    extra = f" (up to {r.dagger.max_rounds} while a round's {judge})" if r.dagger.until else ""
    chosen = {"check": f"; then the round whose weights drive {_count(r.dagger.check, 'check episode')} best is kept",
              "drive": f"; after extra rounds, of round {r.dagger.rounds} and the extra ones the round whose weights drive "
                       f"{_count(r.dagger.select_episodes, 'selection track')} best is kept"}.get(r.dagger.select, "")
    if r.retrain.below:
        print(f"(the run is trained again under another seed, up to {r.retrain.attempts} attempts in all, while its weights drive "
              f"{_count(r.retrain.episodes, 'selection track')} below {r.retrain.below:g}; the attempt that drove them best is kept)")

    def train_once(folder: Path, seed: int) -> None:
        """Stages 2 and 3 of one attempt (resumable)."""
        t1 = time.monotonic()
        _stage(f"2/5 behaviour cloning CNN + {cfg.head}, {_count(r.bc.epochs, 'epoch')}" + (f" (at most {r.bc.minutes:g} min)" if r.bc.minutes else "")
               + f", training seed {seed} -> {folder}")
        train_cfg = cfg.train_config(str(data), str(folder), seed)
        if not (folder / "config.json").is_file():  # the run is identified by its config, written before anything it trains
            train(train_cfg)
        elif not (folder / "dagger.json").is_file():
            train(train_cfg, resume=True)
        timings["train"] = timings.get("train", 0.0) + round(time.monotonic() - t1, 1)
        t1 = time.monotonic()
        _stage(f"3/5 {r.dagger.rounds} DAgger rounds{extra}: {r.dagger.episodes} policy rollouts labelled by the expert, "
               f"{_count(r.dagger.epochs, 'epoch')} of training each{chosen}")
        dagger(cfg.dagger_config(str(folder), seed))
        timings["dagger"] = timings.get("dagger", 0.0) + round(time.monotonic() - t1, 1)

    if train_attempts(r.retrain, run, cfg.seed, train_once, max_steps=cfg.max_steps, workers=cfg.workers, say=lambda line: print(f"retrain: {line}", flush=True)):
        timings["selection"] = round(time.monotonic() - t0 - timings["train"] - timings["dagger"], 1)  # the attempts' drives

    t0 = time.monotonic()
    _stage(f"4/5 closed-loop evaluation on {track_range(cfg.eval_seed_start, cfg.eval_episodes)}, with the expert"
           + (f", clean and in the scenarios {', '.join(cfg.scenarios)}" if cfg.scenarios else ""))
    boards = {name: evaluate(EvaluateConfig(runs=[str(run)], episodes=cfg.eval_episodes, seed_start=cfg.eval_seed_start, workers=cfg.workers,
                                            max_steps=cfg.max_steps, scenario=name))
              for name in dict.fromkeys([CLEAN, *cfg.scenarios])}
    rows = boards[CLEAN]
    write_leaderboard([r for board in boards.values() for r in board], out / "leaderboard.json")
    timed("evaluate", t0)

    t0 = time.monotonic()
    video_path = out / f"{cfg.head}_seed{cfg.eval_seed_start}.mp4"
    _stage(f"5/5 evaluation video of seed {cfg.eval_seed_start} -> {video_path}")
    record_video(RecordConfig(out=str(video_path), runs=[str(run)], seed=cfg.eval_seed_start, max_steps=cfg.max_steps))
    timed("video", t0)
    timings["total"] = round(time.monotonic() - started, 1)

    report = _report(cfg, boards, run, data, timings, video_path)
    (out / "report.md").write_text(report)
    write_json(out / "quickstart.json", {"config": asdict(cfg), "timings_s": timings, "leaderboard": rows,
                                         **({"scenarios": {k: v for k, v in boards.items() if k != CLEAN}} if cfg.scenarios else {})})
    return {"report": str(out / "report.md"), "rows": rows, "timings": timings}


def _report(cfg: QuickstartConfig, boards: dict[str, list[dict[str, Any]]], run: Path, data: Path, timings: dict[str, float], video: Path) -> str:
    metrics = read_json(run / "metrics.json")
    dag = read_json(run / "dagger.json")
    best = metrics.get("best") or {}
    checks = any("check" in r for r in dag["rounds"])
    space = ("continuous (steer, gas, brake)" if cfg.continuous else {
        "wheel": "discrete (5; the network learns the front-wheel angle the expert plans and the expert's target speed, "
                 "and drives by the pulse that steers its wheels there, braking where the expert would on the speed the "
                 "frame's speed bar shows above that target; the excess's error weighted by brake / no brake)",
        "rates": f"discrete (5; the network learns each action's rate over the steps t-{cfg.rate_window}..t+{cfg.rate_window} and "
                 "drives by pulsing at those rates)",
        "actions": "discrete (5; the likeliest action each step)"}[cfg.discrete_target])
    r, t = cfg.trained_by, cfg.train_config(str(data), str(run))
    windows = (f"{1 - t.regular_share:.0%} with frame gaps of 1..{t.stride_jitter} steps and their true timestamps, the rest regular"
               if t.stride_jitter > 1 else "regular frame gaps")
    lines = [
        "# nacdrive quickstart report",
        "",
        f"CNN + {cfg.head} policy for gymnasium CarRacing-v3, {space} actions, trained on this machine's CPU.",
        "",
        f"## Closed loop ({track_range(cfg.eval_seed_start, cfg.eval_episodes)}, deterministic actions, full 1000-step episodes)",
        "",
        to_markdown(boards[CLEAN]),
        "",
        *(line for name, board in boards.items() if name != CLEAN
          for line in (f"In the scenario {name} (agents.carracing.scenarios: a generalization test, never trained on):", "", to_markdown(board), "")),
        "## Training",
        "",
        f"- demonstrations: {data} ({cfg.episodes} track-expert episodes, seeds {1000 * cfg.seed}..{1000 * cfg.seed + cfg.episodes - 1}); job seed {cfg.seed}",
        f"- training windows: {windows}\n"
        f"- behaviour cloning: {_count(r.bc.epochs, 'epoch')}, then {r.dagger.epochs} after each DAgger round, Adam {r.bc.lr:g}: {metrics['epochs']} epochs "
        f"in all, {metrics['train_seconds'] / 60:.1f} min of training; {len(dag['rounds'])} DAgger "
        f"rounds of {r.dagger.episodes} rollouts (mean return while collecting: "
        + ", ".join(rollout_returns(r) for r in dag["rounds"]) + ")"
        + ("; each round's trained weights alone on the check seeds: " + ", ".join(f"round {r['round']} {r['check']['mean_return']:.1f} "
                                                                                  f"({check_worst(r['check'])})"
                                                                                  for r in dag["rounds"] if "check" in r) if checks else "")
        + (f"; the policy's weights: the mean of rounds {dag['average'][0]}..{dag['average'][-1]}'s own" if "average" in dag else "")
        + (f"; the policy's weights: {selected_weights(dag)}" if "selected" in dag else ""),
        *([f"- retrained: {retrain_summary(guard)}"] if (guard := read_state(run)) else []),
        f"- offline, held-out episodes: validation loss {best.get('val_loss', float('nan')):.4f}, "
        f"action-class accuracy {best.get('val_accuracy', float('nan')):.1%}"
        + (f", steering MAE {best['val_steer_mae']:.3f}" if "val_steer_mae" in best else ""),
        f"- time per stage (s): {', '.join(f'{k} {v}' for k, v in timings.items())}",
        "",
        "## Where things are",
        "",
        f"- policy run folder: `{run}` (config.json, best/last weights, metrics.json, TensorBoard in `{run}/tb`)",
        f"- leaderboard: `{Path(cfg.out) / 'leaderboard.json'}`",
        f"- evaluation video (H.264, saliency and action overlays): `{video}`",
        f"- figures of what the policy does: `nacdrive explain {run} --out {Path(cfg.out) / 'explain'}`",
        f"- drive it again: `nacdrive evaluate {run} --episodes 50`",
        "",
    ]
    return "\n".join(lines)
