"""Closed-loop evaluation of trained runs in CarRacing, and their leaderboard.

Every run drives full episodes on the same fixed seeds, which must not be seeds any of its
training episodes came from; the experts drive the same seeds as reference rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from agents.carracing import perturb, scenarios
from agents.carracing.env import RENDERER, RENDERERS, check_renderer, make_env
from agents.carracing.seeds import SELECT_SEED, VALIDATION_SEED, track_range
from agents.evaluation.expert_eval import ExpertEvalConfig, evaluate_expert
from agents.driving.policy import DECODERS, WEIGHTS, DrivingPolicy, check_decoder, default_decoder
from agents.driving.executor import storage_path
from agents.driving.rollout import EpisodeResult, Rollouts, parallel_map, run_episode, run_episodes, shares, summarize
from nac.checkpoint import load_checkpoint, read_json, write_json
from nac.driving import DrivingNet
from nac.config import ConfigError, at_least, check_ranges, need


@dataclass(kw_only=True)
class EvaluateConfig(Rollouts):
    runs: list[str]  # run folders (nacdrive train / dagger, or agents/pretrained/<head>)
    episodes: int = field(default=50, metadata=at_least(1))  # episodes per run
    seed_start: int = VALIDATION_SEED  # seeds seed_start, seed_start + 1, ...: the validation tracks by default; the test
    # tracks (agents.carracing.seeds.TEST_SEED on) for a result to report, driven once at the end; none may be a seed the run trained on
    weights: str = field(default="best", metadata={"choices": WEIGHTS})  # which weights of each run: best (validation) or last
    actions: str | None = field(default=None, metadata={"choices": DECODERS})  # discrete actions from the policy's softmax: the
    # likeliest (argmax), a draw (sample), pulses at the softmax's rates without chance (diffuse: error diffusion), or steering
    # towards the wheel angle of a wheel-angle network (wheel). Default: each run's own (wheel for wheel-angle networks, diffuse
    # for rate networks, else argmax); continuous runs ignore it
    expert: bool = True  # add the track expert's figures on the same seeds as reference rows
    perturb: str | None = None  # one perturbation (agents.carracing.perturb), e.g. "drop=0.2"; None or "none": clean
    renderer: str = field(default=RENDERER, metadata={"choices": RENDERERS})  # how the frames are drawn: direct (nac-drive's
    # renderer, the default everywhere) or gymnasium (gymnasium's own pixels, bit for bit, several times slower); the expert
    # reads the car's state and drives the same either way
    scenario: str = scenarios.CLEAN  # what the frames show (agents.carracing.scenarios.SCENARIOS): a generalization test, or clean
    drive_average: int | None = None  # > 0: each policy sees every frame through this many random convolutions and averages
    # the readouts (Lee et al.'s test-time Monte Carlo; agents.driving.views), 0: none; default: each run's own (its network's
    # drive_average). Costs that many times a policy's step
    batch: int = field(default=5, metadata=at_least(1))  # a run's clean episodes stepped together in one process, one batched policy forward a step (perturbed
    # episodes are driven one at a time); each episode is the one it would be alone

    def __post_init__(self) -> None:
        check_ranges(self)
        super().__post_init__()
        need(bool(self.runs), "give at least one run folder")
        self.runs = [storage_path(r, self.ray) for r in self.runs]
        check_renderer(self.renderer)
        scenarios.check_scenario(self.scenario)
        if self.perturb is not None and self.perturb.strip() == perturb.CLEAN:
            self.perturb = None  # "none" names the clean level in a sweep
        if self.perturb is not None:
            perturb.parse(self.perturb)  # a clear error now, not in a worker
        need(self.weights in WEIGHTS, f"weights must be one of {', '.join(WEIGHTS)} (got {self.weights!r})")
        need(self.actions is None or self.actions in DECODERS, f"actions must be one of {', '.join(DECODERS)} (got {self.actions!r})")


@dataclass
class RunInfo:
    path: str
    head: str
    action_space: str
    training_seeds: list[int]
    val_accuracy: float | None
    decoder: str  # how its discrete actions are taken by default (agents.driving.policy.DrivingPolicy)
    net: dict[str, Any]  # its network's config (DrivingNetConfig)


def describe_run(path: str, weights: str) -> RunInfo:
    """What a run folder is, read from its config.json and metrics.json (and a check that
    its weights load)."""
    config, state = load_checkpoint(path, "cpu", weights)
    DrivingNet.from_checkpoint(config, state, path)  # a run that is no CarRacing run, or whose config or weights this version cannot build, is named before any episode
    keys = config.get("data", {}).get("episodes", [])
    train = config.get("train", {})
    selection = range(SELECT_SEED, SELECT_SEED + train.get("select_episodes", 0))  # they chose the weights: not held out
    seeds = sorted({int(k.rsplit(":", 1)[1]) for k in keys} | set(selection))
    acc = None
    metrics = Path(path) / "metrics.json"
    if metrics.is_file():
        best = read_json(metrics).get("best") or {}
        acc = best.get("val_accuracy")
    return RunInfo(path, config["net"]["head"], config["net"]["action_space"], seeds, acc, default_decoder(config["net"]), config["net"])


def run_policy(path: str, weights: str, actions: str | None, average: int | None = None) -> DrivingPolicy:
    """The run's policy, loaded once per process for its episodes, and again when its weights file has changed since (a DAgger
    round trains a run between its checks, in the process that evaluates it)."""
    return _loaded(path, weights, actions, average, (Path(path) / f"{weights}.safetensors").stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _loaded(path: str, weights: str, actions: str | None, average: int | None, mtime_ns: int) -> DrivingPolicy:
    return DrivingPolicy.from_run(path, weights, "cpu", actions, drive_average=average)


class _Timed:
    """The policy, with the time of every select_action call recorded."""

    def __init__(self, policy: DrivingPolicy) -> None:
        self.policy = policy
        self.ms: list[float] = []

    def reset(self) -> None:
        pass  # reset by drive() with the episode seed; run_episode's reset must not reseed it

    def select_action(self, obs: Any) -> Any:
        t0 = time.perf_counter()
        action = self.policy.select_action(obs)
        self.ms.append((time.perf_counter() - t0) * 1e3)
        return action


class DriveJob(NamedTuple):
    """Episodes of one run to drive in one process (a task of `drive`)."""

    path: str  # the run folder
    weights: str  # best or last
    actions: str | None  # discrete actions' decoder; None: the run's own
    continuous: bool
    max_steps: int
    perturbation: str | None  # agents.carracing.perturb; None: none
    renderer: str  # agents.carracing.env.RENDERERS
    scenario: str  # agents.carracing.scenarios.SCENARIOS
    seeds: tuple[int, ...]
    average: int | None = None  # random-convolution views the policy averages (None: the run's own)


def drive(job: DriveJob) -> list[tuple[str, EpisodeResult, np.ndarray]]:
    """Episodes of one run, one per seed -> [(run, result, step latencies)] in the seeds' order.
    Unperturbed episodes are stepped together (agents.driving.rollout.run_episodes: one batched forward a
    step, its time shared by the episodes); under a perturbation each is driven alone, as its
    frames arrive."""
    path, weights, actions, continuous, max_steps, spec, renderer, scenario, seeds, average = job
    torch.set_num_threads(1)  # one thread per worker: the latency figures are per CPU thread
    policy = run_policy(path, weights, actions, average)
    envs = [make_env(continuous, max_steps, renderer=renderer, scenario=scenario) for _ in seeds]
    try:
        if spec is None:
            ms: list[float] = []
            timed = _TimedBatch(policy, ms)
            results = run_episodes(envs, timed, list(seeds))
            return [(path, r, np.asarray(ms, dtype=np.float32)) for r in results]
        out = []
        for env, seed in zip(envs, seeds):
            policy.reset(seed)
            perturbed = perturb.PerturbedPolicy(policy, perturb.parse(spec), continuous)
            perturbed.reset(seed)
            one = _Timed(perturbed)
            out.append((path, run_episode(env, one, seed), np.asarray(one.ms, dtype=np.float32)))
        return out
    finally:
        for env in envs:
            env.close()


class _TimedBatch:
    """The policy driving several episodes, each batched step's time over its episodes recorded."""

    def __init__(self, policy: DrivingPolicy, ms: list[float]) -> None:
        self.policy, self.ms = policy, ms

    def reset_batch(self, seeds: list[int]) -> None:
        self.policy.reset_batch(seeds)

    def select_actions(self, frames: np.ndarray) -> list[Any]:
        t0 = time.perf_counter()
        actions = self.policy.select_actions(frames)
        self.ms.append((time.perf_counter() - t0) * 1e3 / len(frames))
        return actions


def _row(info: RunInfo, cfg: EvaluateConfig, results: list[EpisodeResult], ms: list[np.ndarray]) -> dict[str, Any]:
    results = sorted(results, key=lambda r: r.seed)
    lat = np.concatenate(ms) if ms else np.zeros(0)
    return {
        "run": info.path,
        "head": info.head,
        "action_space": info.action_space,
        "weights": cfg.weights,
        "actions": "mean" if info.action_space == "continuous" else cfg.actions or info.decoder,
        "perturbation": cfg.perturb or perturb.CLEAN,
        "scenario": cfg.scenario,
        "drive_average": info.net.get("drive_average", 0) if cfg.drive_average is None else cfg.drive_average,
        **summarize(r.episode_return for r in results),
        **shares(results),
        "latency_p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
        "latency_p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
        "val_accuracy": info.val_accuracy,
        "tracks": track_range(cfg.seed_start, cfg.episodes),  # validation or test tracks (agents.carracing.seeds)
        "seeds": [r.seed for r in results],
        "returns": [r.episode_return for r in results],
        "tiles": [r.tiles_visited for r in results],  # each episode's share of its track's tiles
        "skipped": [r.tiles_skipped for r in results],  # each episode's tiles driven past and never touched
    }


def evaluate(cfg: EvaluateConfig) -> list[dict[str, Any]]:
    """The leaderboard: one row per run (and per expert), sorted by mean return."""
    seeds = list(range(cfg.seed_start, cfg.seed_start + cfg.episodes))
    infos = {p: describe_run(p, cfg.weights) for p in cfg.runs}
    for info in infos.values():
        if cfg.actions and info.action_space == "discrete":
            check_decoder(info.net, cfg.actions)
        seen = sorted(set(seeds) & set(info.training_seeds))
        if seen:
            raise ConfigError(
                f"seeds {seen[0]}..{seen[-1]} include training episodes of {info.path}; evaluate on seeds no "
                f"training data came from (--seed-start {max(info.training_seeds) + 1} or higher)"
            )
    group = cfg.batch if cfg.perturb is None else 1
    jobs = [DriveJob(p, cfg.weights, cfg.actions, info.action_space == "continuous", cfg.max_steps, cfg.perturb, cfg.renderer, cfg.scenario,
                     tuple(seeds[k:k + group]), cfg.drive_average)
            for p, info in infos.items() for k in range(0, len(seeds), group)]
    by_run: dict[str, tuple[list[EpisodeResult], list[np.ndarray]]] = {p: ([], []) for p in infos}

    def keep(outs: list[tuple[str, EpisodeResult, np.ndarray]]) -> None:
        for path, result, ms in outs:
            by_run[path][0].append(result)
            by_run[path][1].append(ms)

    def board() -> list[dict[str, Any]]:
        rows = [_row(infos[p], cfg, *by_run[p]) for p in infos if by_run[p][0]]
        return sorted(rows, key=lambda r: -r["mean_return"])

    try:
        parallel_map(
            drive, jobs, cfg.executor(shared=tuple(cfg.runs)), desc="evaluating", on_result=keep,
            postfix=lambda done: {"mean": f"{np.mean([r[1].episode_return for outs in done for r in outs]):.1f}"},
        )
    except KeyboardInterrupt as exc:
        exc.partial = board()  # type: ignore[attr-defined]
        raise
    rows = board()
    if cfg.expert and cfg.perturb is None:  # the expert reads the simulator's state: perturbed frames do not reach it
        for space in sorted({i.action_space for i in infos.values()}):
            r = evaluate_expert(
                ExpertEvalConfig(
                    continuous=space == "continuous", episodes=cfg.episodes, seed_start=cfg.seed_start,
                    workers=cfg.workers, ray=cfg.ray, max_steps=cfg.max_steps, scenario=cfg.scenario,
                )
            )
            rows.append({
                "run": f"expert:track ({space})", "head": "-", "action_space": space, "weights": "-", "actions": "-",
                "perturbation": perturb.CLEAN, "scenario": cfg.scenario,
                **{k: r[k] for k in r if k not in ("config", "episodes_detail", "expert")},
                "latency_p50_ms": None, "latency_p99_ms": None, "val_accuracy": None, "reference": True,
                "tracks": track_range(cfg.seed_start, cfg.episodes),
            })
        rows.sort(key=lambda r: -r["mean_return"])
    return rows


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The leaderboard as a markdown table."""
    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    lines = [
        "| # | run | head | actions | mean ± std | min | 95 % CI | solved | laps | lost to a skipped tile | tiles | p50 / p99 ms | val acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | {r['run']} | {r['head']} | {r['action_space']}" + (f", {r['actions']}" if r.get("actions", "-") != "-" else "")
            + f" | {r['mean_return']:.1f} ± {r['std_return']:.1f} | {r['min_return']:.1f} "
            f"| [{r['ci95_low']:.1f}, {r['ci95_high']:.1f}] | {r['solved_share']:.0%} | {r['finished_share']:.0%} "
            f"| {r['skipped_share']:.0%} | {r['tiles_share']:.1%} | {f(r['latency_p50_ms'], '.2f')} / {f(r['latency_p99_ms'], '.2f')} "
            f"| {f(r['val_accuracy'], '.1%')} |"
        )
    return "\n".join(lines)


def write_leaderboard(rows: list[dict[str, Any]], path: str | Path) -> None:
    """JSON: a list with one object per row (run, mean_return, std_return, returns, ...)."""
    write_json(Path(path), rows)


def robustness_points(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[tuple[float, float, float, float]]]]:
    """{kind: {run: [(level, mean, ci95 low, ci95 high), ...] sorted by level}} of the learned
    rows in the clean scenario; a clean row ("none") is level 0 of every kind, unless that kind was run at 0 itself."""
    learned = [r for r in rows if not r.get("reference") and r.get("scenario", scenarios.CLEAN) == scenarios.CLEAN]
    kinds = sorted({r["perturbation"].split("=")[0] for r in learned} - {perturb.CLEAN})
    points: dict[str, dict[str, list[tuple[float, float, float, float]]]] = {}
    for kind in kinds:
        for run in sorted({r["run"] for r in learned}):
            at: dict[float, dict[str, Any]] = {}
            for r in sorted(learned, key=lambda r: r["perturbation"] != perturb.CLEAN):  # an explicit level 0 wins
                name, _, value = r["perturbation"].partition("=")
                if r["run"] == run and name in (perturb.CLEAN, kind):
                    at[0.0 if name == perturb.CLEAN else float(value)] = r
            if at:
                points.setdefault(kind, {})[run] = sorted((x, r["mean_return"], r["ci95_low"], r["ci95_high"]) for x, r in at.items())
    return points


def robustness_plot(rows: list[dict[str, Any]], path: str | Path) -> list[str]:
    """Mean return (with 95 % intervals) against perturbation level, one line per run, one panel
    per kind of perturbation; returns the kinds plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = robustness_points(rows)
    if not points:
        return []
    heads = {r["run"]: r["head"] for r in rows if not r.get("reference")}
    fig, axes = plt.subplots(1, len(points), figsize=(5 * len(points), 3.8), squeeze=False)
    for ax, (kind, runs) in zip(axes[0], points.items()):
        for run, pts in runs.items():
            x, m, lo, hi = zip(*pts)
            ax.errorbar(x, m, yerr=[np.subtract(m, lo), np.subtract(hi, m)], marker="o", capsize=3, label=f"{heads[run]} ({Path(run).name})")
        perturb.level_panel(ax, kind, "mean return (95 % CI)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return list(points)
