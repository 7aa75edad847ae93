"""`nacdrive quickstart`: from nothing to a NAC policy driving CarRacing, on a laptop CPU.

Collect demonstrations with the privileged track expert, behaviour-clone a CNN + NAC policy,
DAgger rounds, evaluate on held-out seeds beside the expert, record a video, and write a
report. Every stage
is resumable: running the command again continues where an interruption left it, and a
finished stage is not redone.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.training.bc import frame_gaps
from agents.training.tasks import train
from agents.training.loop import TrainConfig
from agents.training.collect import CollectConfig, collect
from agents.carracing.seeds import CHECK_SEED, HELD_OUT_SEED
from agents.training.dagger import FIRST_SEED, DaggerConfig, check_worst, dagger, recipe_beta, rollout_returns
from agents.evaluation.evaluate import EvaluateConfig, evaluate, to_markdown, write_leaderboard
from agents.carracing.scenarios import CLEAN, check_scenario
from agents.figures.video import RecordConfig, record_video
from datasets.demos import DemoSet
from nac.checkpoint import write_json
from nac.config import ConfigError, need


def recipe_for(continuous: bool, head: str) -> dict[str, Any]:
    """The defaults of the quick start, as measured (docs/results.md, "The quick start").

    Continuous: the full recipe's data and DAgger rounds (50 demonstrations, 2 rounds of 10
    rollouts; agents/pretrained/README.md) in two fifths of its training steps, at a 3x learning
    rate: 1 epoch of behaviour cloning and 1 after each round instead of 4 and 2, Adam 3e-4
    (docs/studies/quickstart-10min/README.md, 'The quick start in 10 minutes'), with the recipe's frame gaps for the head
    (agents.training.bc.frame_gaps). Discrete: the discrete expert plans (15-20 ms a step), so 30
    demonstrations, 6 epochs, 2 after each round, Adam 1e-4, three rounds at most (DISCRETE_EXTRA_ROUNDS)
    and the policy's weights the mean of the last three rounds' from round 2 on (DaggerConfig.average;
    a run that stops after two rounds keeps round 2's own). DAgger's beta: the discrete recipe's
    (agents.training.dagger.recipe_beta, 0.5); continuous, 0.3 for every head, NAC included, where the full
    recipe gives NAC 0.5 for its robustness: the quick start is judged on clean laps, and at its
    scale beta 0.3 finished every lap for each of seeds 0, 1, 2 with clean rollouts and with the
    perturbed ones, where 0.5 with the perturbed ones lost a lap on seed 2 (894.4, 9 laps of 10;
    docs/studies/nac-jitter-diagnosis/README.md, "NAC under jitter")."""
    # extra_rounds is not a field: dagger_max_rounds defaults to dagger_rounds (which the user may set) + these
    counts = ({"episodes": 50, "train_epochs": 1, "dagger_epochs": 1, "lr": 3e-4, "dagger_beta": 0.3, "dagger_average": 1,
               "extra_rounds": EXTRA_ROUNDS} if continuous else
              {"episodes": 30, "train_epochs": 6, "dagger_epochs": 2, "lr": 1e-4, "dagger_beta": recipe_beta(head, continuous),
               "dagger_average": 3, "extra_rounds": DISCRETE_EXTRA_ROUNDS})
    return {**counts, **frame_gaps(head, continuous)}


DISCRETE_TARGETS = ("wheel", "rates", "actions")
# DAgger rounds the quick start may add while the last round falls short (its rollouts' mean below dagger_until, or its trained
# weights' on their check, or a check track lost; dagger --until, --check): a fourth round lifted the runs a third left short
# above 880 (docs/studies/discrete-heads/README.md, 'A fourth round')
EXTRA_ROUNDS = 2
# Discrete: one, for the quick start's time: with its weights averaged over rounds 2..3 a fourth changed the draws little. The
# discrete recipe for every head keeps the fourth (--dagger-max-rounds 4), which one study run needed
# (docs/studies/discrete-heads-avg/)
DISCRETE_EXTRA_ROUNDS = 1


@dataclass
class QuickstartConfig:
    out: str = "runs/quickstart"  # everything goes here
    head: str = "nac"  # the sequence head to train
    continuous: bool = True  # continuous actions (the expert finishes every lap); False: 5 discrete
    discrete_target: str = "wheel"  # discrete only, what the network learns (DISCRETE_TARGETS): "wheel", the front-wheel angle the
    # expert plans and the expert's target speed, driven by the pulse that steers the wheels there and braking on the speed
    # bar's speed above the target (train --wheel-target --wheel-speed target); "rates", each action's rate over t-R..t+R,
    # driven by pulsing at those rates (train --rate-window); "actions", the expert's action itself, driven by argmax
    # (docs/studies/discrete-heads/README.md, 'Discrete actions')
    rate_window: int = 4  # "rates": R
    turn_weight: float = 0.0  # "wheel": the angle's error weighted where the expert's plan turns fast (train --turn-weight)
    # None: the recipe measured best for the action space and head (recipe_for, above)
    episodes: int | None = None  # expert demonstrations (seeds 1000 * seed ..)
    train_epochs: int | None = None  # behaviour cloning
    train_minutes: float | None = None  # stop it after this many minutes (None: no cap; a cap makes the recipe depend
    # on the machine: two quick starts at once on 2 cores got 4 epochs instead of 6 and drove 577 and 708 instead of 816)
    stride_jitter: int | None = None  # > 1: training windows with frame gaps of 1..J steps (true timestamps kept), for a share ...
    regular_share: float | None = None  # ... 1 - P of them (train --stride-jitter / --regular-share)
    dagger_rounds: int = 2  # DAgger rounds (the pretrained policies' recipe)
    dagger_until: float = 880.0  # then one more round while the last round's trained weights drove an episode below this return ...
    dagger_check: int = DaggerConfig.check  # ... of this many alone (dagger --check) ...
    dagger_max_rounds: int | None = None  # ... up to this many rounds in all (None: the recipe's extra rounds more than dagger_rounds,
    # EXTRA_ROUNDS, with discrete actions DISCRETE_EXTRA_ROUNDS; dagger --until / --max-rounds; docs/studies/discrete-heads/README.md, 'More rounds while the rollouts fall short')
    dagger_episodes: int = 10  # policy rollouts labelled by the expert, per round
    dagger_epochs: int | None = None  # training after each DAgger round
    dagger_average: int | None = None  # the policy's weights: the mean of the last K rounds' own, from round 2 on (dagger --average)
    lr: float | None = None  # Adam's learning rate, behaviour cloning and DAgger rounds alike
    val_fraction: float = TrainConfig.val_fraction  # share of the demonstrations held out to choose the best weights by validation loss
    dagger_minutes: float | None = None  # stop it after this many minutes (None: no cap)
    dagger_beta: float | None = None  # round r executes the expert's action with probability beta ** r
    dagger_takeover: float = DaggerConfig.takeover  # > 0: the expert takes over while the car is this many u/s too fast or off the road
    dagger_perturb: str = DaggerConfig.perturb  # the policy drives half the rollouts under it (auto: the run's frame gaps; dagger --perturb)
    eval_episodes: int = 10  # held-out seeds from eval_seed_start
    scenarios: list[str] = field(default_factory=list)  # the report also drives those seeds in these generalization scenarios
    # (agents.carracing.scenarios), one leaderboard each beside the clean one
    eval_seed_start: int = HELD_OUT_SEED
    workers: int = 0  # processes for driving; 0 = up to 2
    max_steps: int = 1000  # steps per episode (CarRacing's limit)
    seed: int = 0  # one seed for the whole job: demonstrations from seed 1000 * S, training seed S, DAgger rollouts from 1 000 000 + 1000 * S

    def __post_init__(self) -> None:
        recipe = recipe_for(self.continuous, self.head)
        extra_rounds = recipe.pop("extra_rounds")
        for name, value in recipe.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.dagger_max_rounds is None:
            self.dagger_max_rounds = self.dagger_rounds + extra_rounds
        need(self.episodes >= 2, f"episodes must be >= 2 (one is held out for validation; got {self.episodes})")
        need(all(m is None or m > 0 for m in (self.train_minutes, self.dagger_minutes)), "training minutes must be > 0")
        need(self.train_epochs >= 1 and self.dagger_epochs >= 1, "training epochs must be >= 1")
        need(self.dagger_episodes >= 1 and self.eval_episodes >= 1, "episode counts must be >= 1")
        for name in self.scenarios:
            check_scenario(name)
        need(self.seed >= 0, f"seed must be >= 0 (got {self.seed})")
        need(self.discrete_target in DISCRETE_TARGETS,
             f"discrete_target must be one of {', '.join(DISCRETE_TARGETS)} (got {self.discrete_target!r})")
        need(self.rate_window >= 1, f"rate_window must be >= 1 (got {self.rate_window})")
        self.train_config("<demos>", "<run>")  # its fields are checked now, with training's own messages, before anything runs
        try:  # and the DAgger rounds' (a bad --dagger-beta would otherwise fail after the training)
            self.dagger_config("<run>")
        except ConfigError as e:
            raise ConfigError(f"the DAgger rounds' {e}") from None
        first, last = 1000 * self.seed, 1000 * self.seed + self.episodes - 1
        checks = self.dagger_check if self.dagger_until else 0
        for what, start, count, advice in (("the held-out seeds", self.eval_seed_start, self.eval_episodes, f"a seed below {self.eval_seed_start // 1000}"),
                                           ("the DAgger check's seeds", CHECK_SEED, checks, "another seed")):
            need(last < start or first >= start + count, f"seed {self.seed} would record demonstrations on seeds {first}..{last}, which include "
                                                         f"{what} {start}..{start + count - 1}; choose {advice}")

    def dagger_config(self, run: str) -> DaggerConfig:
        """The DAgger rounds of the job (rollout seeds from FIRST_SEED + 1000 * seed)."""
        return DaggerConfig(
            run=run, rounds=self.dagger_rounds, until=self.dagger_until, check=self.dagger_check, max_rounds=self.dagger_max_rounds, episodes=self.dagger_episodes, epochs=self.dagger_epochs, average=self.dagger_average, minutes=self.dagger_minutes,
            workers=self.workers, max_steps=self.max_steps, seed_start=FIRST_SEED + 1000 * self.seed, beta=self.dagger_beta,
            takeover=self.dagger_takeover, perturb=self.dagger_perturb,
        )

    def train_config(self, data: str, run: str) -> TrainConfig:
        """The behaviour cloning of the job."""
        target = None if self.continuous else self.discrete_target
        net = {"wheel": {"wheel_target": True, "wheel_speed": "target"}, "rates": {"rate_window": self.rate_window}}.get(target, {})
        # wheel: the speed excess's error weighted by brake / no brake (the expert brakes on ~1 % of steps; unweighted, the
        # network's excess stayed below the brake threshold at bend entries): 851.0 and 873.2 with 6 and 9 laps of 10
        # against 721.4 and 902.2 with 4 and 6 (docs/studies/discrete-heads/README.md, 'Discrete actions')
        balance = "weights" if target == "wheel" else "auto"
        return TrainConfig(data=[data], out=run, head=self.head, epochs=self.train_epochs, minutes=self.train_minutes, seed=self.seed,
                           lr=self.lr, val_fraction=self.val_fraction, balance=balance, turn_weight=self.turn_weight,
                           stride_jitter=self.stride_jitter, regular_share=self.regular_share, net=net)


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
    _stage(f"2/5 behaviour cloning CNN + {cfg.head}, {_count(cfg.train_epochs, 'epoch')}" + (f" (at most {cfg.train_minutes:g} min)" if cfg.train_minutes else "") + f" -> {run}")
    train_cfg = cfg.train_config(str(data), str(run))
    state_file = run / "train_state.json"
    if not state_file.is_file():
        train(train_cfg)
    elif not (run / "dagger.json").is_file():
        train(train_cfg, resume=True)
    timed("train", t0)

    t0 = time.monotonic()
    judge = f"clean rollouts average below {cfg.dagger_until:g}" + (
        f" or its trained weights, driving {_count(cfg.dagger_check, 'check episode')}, do or lose a track" if cfg.dagger_check else "")
    extra = f" (up to {cfg.dagger_max_rounds} while a round's {judge})" if cfg.dagger_until else ""
    _stage(f"3/5 {cfg.dagger_rounds} DAgger rounds{extra}: {cfg.dagger_episodes} policy rollouts labelled by the expert, "
           f"{_count(cfg.dagger_epochs, 'epoch')} of training each")
    dagger(cfg.dagger_config(str(run)))
    timed("dagger", t0)

    t0 = time.monotonic()
    _stage(f"4/5 closed-loop evaluation on {cfg.eval_episodes} held-out seeds ({cfg.eval_seed_start}..), with the expert"
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
    metrics = json.loads((run / "metrics.json").read_text())
    dag = json.loads((run / "dagger.json").read_text())
    best = metrics.get("best") or {}
    checks = any("check" in r for r in dag["rounds"])
    space = ("continuous (steer, gas, brake)" if cfg.continuous else {
        "wheel": "discrete (5; the network learns the front-wheel angle the expert plans and the expert's target speed, "
                 "and drives by the pulse that steers its wheels there, braking where the expert would on the speed the "
                 "frame's speed bar shows above that target; the excess's error weighted by brake / no brake)",
        "rates": f"discrete (5; the network learns each action's rate over the steps t-{cfg.rate_window}..t+{cfg.rate_window} and "
                 "drives by pulsing at those rates)",
        "actions": "discrete (5; the likeliest action each step)"}[cfg.discrete_target])
    windows = (f"{1 - cfg.regular_share:.0%} with frame gaps of 1..{cfg.stride_jitter} steps and their true timestamps, the rest regular"
               if cfg.stride_jitter > 1 else "regular frame gaps")
    lines = [
        "# nacdrive quickstart report",
        "",
        f"CNN + {cfg.head} policy for gymnasium CarRacing-v3, {space} actions, trained on this machine's CPU.",
        "",
        "## Closed loop (held-out seeds, deterministic actions, full 1000-step episodes)",
        "",
        to_markdown(boards[CLEAN]),
        "",
        *(line for name, board in boards.items() if name != CLEAN
          for line in (f"In the scenario {name} (agents.carracing.scenarios: a generalization test, never trained on):", "", to_markdown(board), "")),
        "## Training",
        "",
        f"- demonstrations: {data} ({cfg.episodes} track-expert episodes, seeds {1000 * cfg.seed}..{1000 * cfg.seed + cfg.episodes - 1}); job seed {cfg.seed}",
        f"- training windows: {windows}\n"
        f"- behaviour cloning: {_count(cfg.train_epochs, 'epoch')}, then {cfg.dagger_epochs} after each DAgger round, Adam {cfg.lr:g}: {metrics['epochs']} epochs "
        f"in all, {metrics['train_seconds'] / 60:.1f} min of training; {len(dag['rounds'])} DAgger "
        f"rounds of {cfg.dagger_episodes} rollouts (mean return while collecting: "
        + ", ".join(rollout_returns(r) for r in dag["rounds"]) + ")"
        + ("; each round's trained weights alone on the check seeds: " + ", ".join(f"round {r['round']} {r['check']['mean_return']:.1f} "
                                                                                  f"({check_worst(r['check'])})"
                                                                                  for r in dag["rounds"] if "check" in r) if checks else "")
        + (f"; the policy's weights: the mean of rounds {dag['average'][0]}..{dag['average'][-1]}'s own" if "average" in dag else ""),
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
