"""The Udacity path in `nacdrive study --task udacity`: PilotNet runs (one per head and training
seed) trained on one stand-in recording, every held-out episode driven as a user drives it: the
stand-in simulator (`sim`) through a bridge (`drive`) of its own, in another process.

The grid, resume, scheduling, study.json and the report are agents.studies.study's; this module says how
a Udacity study records, trains and drives (sim_bridge.udacity_runs.UDACITY, an agents.studies.study.StudyKind).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import websocket

from agents.driving.rollout import EpisodeResult
from agents.studies.grid import StudyConfig
from agents.training.collect import DemosRecipe
from agents.training.recipe import Recipe
from agents.studies.study import StudyKind, episode_record, quiet_bars, train_resumable
from agents.training.udacity import training_tracks
from datasets.udacity import recorded_seeds
from nac.config import ConfigError
from sim_bridge.round_trips import free_port
from sim_bridge.carracing_sim import drive_autonomous, record_training
from sim_bridge.config import SimConfig

BRIDGE_START_S = 120.0  # a bridge process imports torch and loads its run before it listens; under load that takes a while


def record(cfg: StudyConfig, recipe: DemosRecipe) -> None:
    """The expert's drives on seeds 0 .. demos - 1 in the simulator's recording format (with the recipe's
    steering drift: DART), written whole or not at all (an interrupted recording is
    redone: it takes a minute or two)."""
    demos, noise = cfg.demos_dir(recipe), recipe.noise
    if len(recorded_seeds([str(demos)])) >= cfg.demos:
        return
    partial = demos.with_name(demos.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(demos, ignore_errors=True)  # fewer tracks than asked: the study grew its recording
    record_training(SimConfig(record=str(partial), episodes=cfg.demos, seed=0, max_steps=cfg.max_steps, noise=noise))
    partial.rename(demos)
    # the recording's rows name their images by absolute path; the loader finds them by file name in IMG/


def train_run(job: dict[str, Any]) -> dict[str, Any]:
    """One PilotNet run to its end (a task), resumed from its own state if interrupted."""
    torch.set_num_threads(1)
    run, recipe = Path(job["path"]), Recipe.from_dict(job["recipe"])
    started = time.monotonic()
    tc = recipe.train_config(job["demos"], str(run), job["head"], job["seed"], task="udacity", device=job.get("device", "auto"))
    with quiet_bars():
        metrics = train_resumable(tc)
    best = metrics.get("best") or {}
    return {
        "path": str(run), "train_seconds": metrics.get("train_seconds"), "wall_seconds": round(time.monotonic() - started, 1),
        "val_loss": best.get("val_loss"), "val_mae": best.get("val_mae"),
    }


def serve(path: str, port: str, speed: str, turn_slowdown: str) -> None:
    """A bridge for one run, as `nacdrive drive RUN --port P --speed S --turn-slowdown T` serves it (silently)."""
    from sim_bridge.config import BridgeConfig
    from sim_bridge.server import serve_run

    with open(os.devnull, "w") as sink:
        cfg = BridgeConfig(port=int(port), speed=None if speed == "None" else float(speed), turn_slowdown=float(turn_slowdown), status_every=0)
        serve_run(path, cfg, out=sink)


def wait_listening(port: int, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until the bridge process `proc` listens on `port`; an error with its stderr if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            err = err.decode(errors="replace") if isinstance(err, bytes) else err  # a text-mode pipe gives str
            raise RuntimeError(f"the bridge exited ({proc.returncode}): {err[-500:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the bridge did not listen within {timeout:.0f} s")


EPISODE_ATTEMPTS = 3  # a bridge that dies mid-episode (killed, out of memory) costs a redo, not the study


def episode(job: tuple[str, float | None, int, int, float]) -> dict[str, Any]:
    """One held-out episode (a work item): a bridge process for the run, the stand-in drives through it (episode_once),
    driven again where the bridge was lost."""
    return driven_again(episode_once, job)


def driven_again(drive: Callable[[Any], dict[str, Any]], job: tuple[str, float | None, int, int, float]) -> dict[str, Any]:
    """drive(job), again from its start while a lost bridge cuts it short (the episode is deterministic), up to
    EPISODE_ATTEMPTS times."""
    for attempt in range(1, EPISODE_ATTEMPTS + 1):
        try:
            return drive(job)
        except (OSError, RuntimeError, websocket.WebSocketException) as exc:
            if attempt == EPISODE_ATTEMPTS:
                raise RuntimeError(f"seed {job[3]}: the bridge failed {attempt} times ({type(exc).__name__}: {exc})") from None
    raise AssertionError("unreachable")


def episode_once(job: tuple[str, float | None, int, int, float]) -> dict[str, Any]:
    path, speed, max_steps, seed, turn_slowdown = job
    port = free_port()
    code = "import sys; from sim_bridge.udacity_runs import serve; serve(*sys.argv[1:])"
    proc = subprocess.Popen([sys.executable, "-c", code, path, str(port), str(speed), str(turn_slowdown)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        wait_listening(port, proc, BRIDGE_START_S)
        r = drive_autonomous(SimConfig(port=port, seed=seed, episodes=1, max_steps=max_steps))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    if r["unexpected_replies"]:
        raise ConfigError(f"the bridge gave {r['unexpected_replies']} unexpected replies driving seed {seed}")
    return episode_record(EpisodeResult(**r["episodes_detail"][0]), r["bridge"].get("p50_ms"))


def episodes(jobs: list[tuple[str, float | None, int, int, float]]) -> list[dict[str, Any]]:
    """A study's task: its episodes one after the other, each through its own bridge."""
    return [episode(job) for job in jobs]


UDACITY = StudyKind(
    record=record, train=train_run, episodes=episodes,
    episode_job=lambda cfg, path, level, seeds: [(path, cfg.speed, cfg.max_steps, seed, cfg.turn_slowdown) for seed in seeds],
    training_seeds=training_tracks, batch=1,  # a bridge per episode: nothing to share
)
