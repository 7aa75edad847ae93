"""The fault harness: each long job run in a subprocess and killed with SIGKILL (no handler runs, as in a power cut
or the kernel's OOM killer) at points drawn from its own progress, then resumed with the same command. The result
must equal an uninterrupted run's, and no file may be left that a later command reads as valid when it is not.

The points are the job's crash points (nac.checkpoint.crash_point: on either side of every rename of a whole file,
between weights and their JSON, between a recorded frame and its row). An uninterrupted run counts them
(NACDRIVE_CRASH_LOG); each killed run dies at the N-th (NACDRIVE_CRASH_AT=N), N drawn at random from them.

Each suite run draws a few points per job (NACDRIVE_FAULT_POINTS, default 2; the seed of the draw is in every failure
message and NACDRIVE_FAULT_SEED repeats it); NACDRIVE_FAULT_POINTS=all tries every point of every job (slow: tens of
minutes). A job's episodes are driven in the job's own process (--workers 1), so the kill takes the whole job.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from safetensors.torch import load_file

from datasets.demos import DemoSet, read_episode
from datasets.udacity import read_log
from nac.checkpoint import CRASH_AT, CRASH_LOG
from tests.limits import seconds

SEED = int(os.environ.get("NACDRIVE_FAULT_SEED") or random.SystemRandom().randrange(2**31))
POINTS = os.environ.get("NACDRIVE_FAULT_POINTS", "2")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one thread: the killed, resumed and reference runs alike
ENV.pop(CRASH_AT, None)
ENV.pop(CRASH_LOG, None)
TINY = "base:epochs=1,dagger_rounds=1,dagger_episodes=1,dagger_epochs=1,val_fraction=0.3"


def _nacdrive(argv: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:  # generous: a job here takes seconds
    return subprocess.run([sys.executable, "-m", "scripts.cli", *argv], env=env or ENV, capture_output=True, text=True, timeout=seconds(timeout))


@dataclass
class Job:
    """A long job: its command in a folder, how to resume it there, what its result is, and what a kill may leave."""

    name: str
    command: Callable[[Path, dict], list[str]]  # (folder, fixtures) -> argv
    result: Callable[[Path], object]  # folder -> a value to compare with the uninterrupted run's (no paths, no times)
    valid: Callable[[Path], None]  # folder -> asserts that what a later command reads is whole (after the kill)
    resume: Callable[[Path, list[str]], list[str]] = lambda folder, argv: argv  # the command that resumes it
    resumable: bool = True


def _tensors(path: Path) -> dict[str, list]:
    return {k: v.flatten().tolist() for k, v in sorted(load_file(str(path)).items())}


# ---------------------------------------------------------------------- collect
def _demo_result(d: Path) -> object:
    demos = DemoSet(d)
    assert not demos.check(), demos.check()
    seeds = demos.seeds()
    assert len(seeds) == len(set(seeds)), f"an episode twice: {seeds}"
    return [(e["seed"], e["length"], e["sha256"]) for e in demos.episodes]


def _demos_valid(d: Path) -> None:
    """Every episode file under its final name reads whole; the manifest lists only whole files."""
    for f in d.glob("episode_*.npz"):
        read_episode(f)
    if (d / "manifest.json").is_file():
        demos = DemoSet(d)
        for e in demos.episodes:
            read_episode(d / e["file"])


COLLECT = Job(
    "collect",
    lambda d, fx: ["collect", "--expert", "track", "--episodes", "3", "--max-steps", "30", "--workers", "1", "--out", str(d / "demos")],
    lambda d: _demo_result(d / "demos"),
    lambda d: _demos_valid(d / "demos"),
    lambda d, argv: argv + ["--resume"] if (d / "demos" / "manifest.json").is_file() else argv,  # as the user would
)


# ---------------------------------------------------------------------- train
def _run_valid(run: Path) -> None:
    """A run's weights, where they are under their final name, load with its config; its resumable state loads."""
    from agents.driving.policy import load_run

    for weights in ("best", "last"):
        if (run / f"{weights}.safetensors").is_file():  # never weights without the config beside them
            load_run(run, weights)
    if (run / "train_state.json").is_file():
        state = json.loads((run / "train_state.json").read_text())
        load_file(str(run / f"train_state.{state['slot']}.safetensors"))


def _train_resume(d: Path, argv: list[str]) -> list[str]:
    return argv + ["--resume"] if (d / "run" / "config.json").is_file() else argv


TRAIN = Job(
    "train",
    lambda d, fx: ["train", "--data", fx["demos"], "--out", str(d / "run"), "--head", "nac", "--epochs", "2", "--batch-size", "8",
                   "--checkpoint-seconds", "0.3", "--quiet"],
    lambda d: (_tensors(d / "run" / "best.safetensors"), _tensors(d / "run" / "last.safetensors")),
    lambda d: _run_valid(d / "run"),
    _train_resume,
)


# ---------------------------------------------------------------------- dagger
def _dagger_folder(d: Path, fx: dict) -> list[str]:
    if not (d / "run").exists():
        shutil.copytree(fx["run"], d / "run")
    return ["dagger", "--run", str(d / "run"), "--rounds", "1", "--episodes", "2", "--epochs", "1", "--workers", "1", "--max-steps", "30",
            "--quiet"]


DAGGER = Job(
    "dagger",
    _dagger_folder,
    lambda d: (_tensors(d / "run" / "best.safetensors"), _demo_result(d / "run" / "dagger")),
    lambda d: (_run_valid(d / "run"), (d / "run" / "dagger").is_dir() and _demos_valid(d / "run" / "dagger")),
)


# ---------------------------------------------------------------------- study
def _study_result(d: Path) -> object:
    data = json.loads((d / "study" / "study.json").read_text())
    episodes = sorted((e["run"], e["level"], e["episode_seed"], e["return"], e["length"]) for e in data["episodes"])
    keys = [e[:3] for e in episodes]
    assert len(keys) == len(set(keys)), "an episode counted twice"
    assert all(r["done"] for r in data["runs"].values())
    return episodes, {k: _tensors(d / "study" / "runs" / k / "best.safetensors") for k in sorted(data["runs"])}


def _study_valid(d: Path) -> None:
    if (d / "study" / "study.json").is_file():
        json.loads((d / "study" / "study.json").read_text())
    for run in (d / "study" / "runs").glob("*/*/seed*"):
        _run_valid(run)
    if (d / "study" / "demos").is_dir():
        for demos in (d / "study" / "demos").iterdir():
            _demos_valid(demos)


STUDY = Job(
    "study",
    lambda d, fx: ["study", "--heads", "nac", "--seeds", "1", "--demos", "3", "--episodes", "2", "--seed-start", "100", "--max-steps", "30",
                   "--variant", TINY, "--workers", "1", "--out", str(d / "study")],
    _study_result,
    _study_valid,
)


# ---------------------------------------------------------------------- quickstart
def _quickstart_result(d: Path) -> object:
    metrics = json.loads((d / "qs" / "nac" / "metrics.json").read_text())
    return _tensors(d / "qs" / "nac" / "best.safetensors"), _demo_result(d / "qs" / "demos"), metrics["steps"]


QUICKSTART = Job(
    "quickstart",
    lambda d, fx: ["quickstart", "--out", str(d / "qs"), "--episodes", "2", "--epochs", "1", "--dagger-rounds", "1", "--dagger-episodes", "1",
                   "--dagger-epochs", "1", "--dagger-until", "0", "--retrain-below", "0", "--eval-episodes", "1", "--workers", "1",
                   "--max-steps", "30", "--seed", "1"],
    _quickstart_result,
    lambda d: (_run_valid(d / "qs" / "nac") if (d / "qs" / "nac").is_dir() else None,
               _demos_valid(d / "qs" / "demos") if (d / "qs" / "demos").is_dir() else None),
)


# ---------------------------------------------------------------------- the simulator's recording
def _rows(d: Path) -> list[tuple]:
    rec = read_log(d / "rec")
    return [(s.images["center"], s.steering, s.throttle, s.brake, s.speed) for s in rec.samples]


def _recording_valid(d: Path) -> None:
    """What the loader reads of a killed recording is what the recording had whole: the reference's first rows."""
    if not (d / "rec" / "driving_log.csv").is_file() or not (d / "rec" / "driving_log.csv").read_text().strip():
        return
    rows = _rows(d)
    assert rows == REFERENCE["recording"][: len(rows)], "a row the loader reads differs from the uninterrupted recording's"


RECORDING = Job(
    "recording",
    lambda d, fx: ["sim", "--record", str(d / "rec"), "--episodes", "1", "--max-steps", "40", "--seed", "20000"],
    _rows,
    _recording_valid,
    resumable=False,  # as the simulator's: a recording interrupted is kept as it is, and another goes into a new folder
)

JOBS = [COLLECT, TRAIN, DAGGER, STUDY, QUICKSTART, RECORDING]
REFERENCE: dict[str, object] = {}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory, tiny_demos_continuous) -> dict:
    """What the jobs start from: demonstrations, and a trained run for DAgger."""
    run = tmp_path_factory.mktemp("faults") / "run"
    r = _nacdrive(["train", "--data", tiny_demos_continuous, "--out", str(run), "--head", "nac", "--epochs", "1", "--batch-size", "8",
                   "--quiet"])
    assert r.returncode == 0, r.stderr[-2000:]
    return {"demos": tiny_demos_continuous, "run": str(run)}


def _draw(count: int, job: str) -> list[int]:
    if POINTS == "all":
        return list(range(1, count + 1))
    rng = random.Random(f"{SEED}:{job}")
    return sorted(rng.sample(range(1, count + 1), min(int(POINTS), count)))


@pytest.mark.timeout(0 if POINTS == "all" else 600)  # every point of a job: tens of minutes
@pytest.mark.parametrize("job", JOBS, ids=[j.name for j in JOBS])
def test_a_job_killed_anywhere_resumes_to_the_uninterrupted_result(job: Job, fixtures, tmp_path):
    ref = tmp_path / "reference"
    ref.mkdir()
    log = tmp_path / "points.log"
    r = _nacdrive(job.command(ref, fixtures), {**ENV, CRASH_LOG: str(log)})
    assert r.returncode == 0, r.stderr[-2000:]
    points = log.read_text().splitlines()
    assert len(points) >= 5, points  # the job has crash points to be killed at
    REFERENCE[job.name] = expected = job.result(ref)
    tried = []
    for n in _draw(len(points), job.name):
        where = f"{job.name} killed at point {n} of {len(points)} ({points[n - 1]}; NACDRIVE_FAULT_SEED={SEED})"
        d = tmp_path / f"kill{n}"
        d.mkdir()
        argv = job.command(d, fixtures)
        killed = _nacdrive(argv, {**ENV, CRASH_AT: str(n)})
        # a point reached late in a run that saves on a timer may not come: then the run ends whole
        assert killed.returncode in (-signal.SIGKILL, 0), f"{where}: {killed.stderr[-2000:]}"
        job.valid(d)
        if job.resumable:
            resumed = _nacdrive(job.resume(d, argv))
            assert resumed.returncode == 0, f"{where}, then resumed: {resumed.stderr[-2000:]}"
            assert job.result(d) == expected, f"{where}: the resumed result differs from the uninterrupted run's"
        tried.append(n)
    assert tried
    print(f"fault harness: {job.name}: killed at {len(tried)} of its {len(points)} points {tried}, each resumed to the same result")
