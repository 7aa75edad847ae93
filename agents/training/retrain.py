"""Training a run again when it drives poorly: the recipe's guard against weak runs. About one training run in ten is weak on
clean tracks whatever the recipe (docs/studies/contrast-reference/): it loses laps the others drive, from behaviour cloning on
or from a DAgger round. Driving the finished run's weights on 50 selection tracks (SELECT_SEED.., apart from the check, the
validation and the test tracks) tells the weak runs apart, where DAgger's 16 check tracks do not; a weak run is trained
again, from the same demonstrations, under another training seed, and the run keeps the attempt that drove best.

Attempt 0 is the run as the recipe without the guard trains it, in the run folder itself (so a run trained before the guard
is its attempt 0); attempt k trains in RUN/attempts/k under training seed seed + ATTEMPT_SEED_STEP * k. RUN/retrain.json keeps
each attempt's selection drive as it finishes, and the one chosen; when it is not attempt 0, attempt 0's files move to
RUN/attempts/0 and the chosen attempt's are copied into RUN, so that RUN is the chosen run for everything that reads it
(evaluation, videos, reports). Every step is resumable: a stop loses at most the attempt or the drive under way.

One function, train_attempts, applies the guard for every job that trains a run by a recipe (a study's runs, the quick start),
so that a recipe's retrain fields are never ignored."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agents.carracing.seeds import SELECT_SEED
from agents.training.rounds import drive_weights
from nac.checkpoint import read_json, write_json
from nac.config import ConfigDict, at_least, check_ranges, need

STATE = "retrain.json"
ATTEMPTS = "attempts"  # RUN/attempts/k: attempt k's run folder
ATTEMPT_SEED_STEP = 1000  # attempt k trains under seed + 1000 k: apart from every other run's seed in a study of fewer seeds


@dataclass
class RetrainRecipe(ConfigDict):
    """When a finished run is trained again: the recipe's part that train_attempts applies (agents.training.recipe.Recipe
    holds one)."""

    WHAT = "retrain fields"

    below: float = 0.0  # > 0: once the run is trained (behaviour cloning and DAgger), its weights drive `episodes` selection
    # tracks (SELECT_SEED..); a mean return below this trains it again from the same demonstrations under another training
    # seed, until an attempt drives them at least this well or `attempts` were trained, and the run keeps the attempt that
    # drove them best (an earlier one wins a tie). 0: one attempt, nothing driven
    attempts: int = 3  # with below: the most attempts in all
    episodes: int = field(default=50, metadata=at_least(1))  # with below: the selection tracks each attempt drives

    def __post_init__(self) -> None:
        check_ranges(self)
        need(self.attempts >= 2 or not self.below, f"attempts (the most in all, with below) must be >= 2 (got {self.attempts})")


def attempt_folder(run: Path, k: int) -> Path:
    return run if k == 0 else run / ATTEMPTS / str(k)


def attempt_seed(seed: int, k: int) -> int:
    return seed + ATTEMPT_SEED_STEP * k


def read_state(run: Path) -> dict[str, Any] | None:
    """RUN/retrain.json (None: the run was trained without the guard)."""
    path = run / STATE
    return read_json(path) if path.is_file() else None


def train_attempts(guard: RetrainRecipe, run: Path, seed: int, train_once: Callable[[Path, int], None], max_steps: int, workers: int = 1,
                   say: Callable[[str], None] = lambda _: None) -> dict[str, Any] | None:
    """Train the run by train_once(folder, training seed) (behaviour cloning and DAgger, resumable), and again as the guard
    says; returns retrain.json's content (None without the guard). `say` hears each attempt's start and drive."""
    if not guard.below:
        train_once(run, seed)
        return None
    state = read_state(run) or {"below": guard.below, "attempts": []}
    while state.get("chosen") is None:
        k = len(state["attempts"])
        folder, k_seed = attempt_folder(run, k), attempt_seed(seed, k)
        if k:
            say(f"attempt {k + 1} of at most {guard.attempts}, training seed {k_seed} -> {folder}")
        train_once(folder, k_seed)
        say(f"attempt {k + 1}: driving {guard.episodes} selection tracks")
        drive = drive_weights(folder, guard.episodes, SELECT_SEED, workers=workers, max_steps=max_steps)
        state["attempts"].append({"attempt": k, "seed": k_seed, "selection": drive})
        means = [a["selection"]["mean_return"] for a in state["attempts"]]
        say(f"attempt {k + 1}: mean return {means[-1]:.1f} on the selection tracks" + (f" (below {guard.below:g})" if means[-1] < guard.below else ""))
        if means[-1] >= guard.below or len(means) >= guard.attempts:
            state["chosen"] = max(range(len(means)), key=lambda i: (means[i], -i))
        write_json(run / STATE, state)
    if not state.get("placed"):
        place(run, state["chosen"])
        state["placed"] = True
        write_json(run / STATE, state)
    return state


def place(run: Path, chosen: int) -> None:
    """RUN := the chosen attempt's files; attempt 0's move to RUN/attempts/0 first (through attempts/.0, renamed once whole).
    Run again after a stop, it finishes what was left."""
    if chosen == 0:
        return
    home, moving = run / ATTEMPTS / "0", run / ATTEMPTS / ".0"
    own = [p for p in run.iterdir() if p.name not in (ATTEMPTS, STATE)]
    if not home.is_dir():
        moving.mkdir(parents=True, exist_ok=True)
        for p in own:
            p.rename(moving / p.name)
        moving.rename(home)
        own = []
    for p in own:  # a copy of the chosen attempt that a stop cut short
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    src = attempt_folder(run, chosen)
    for p in src.iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, run / p.name)


def retrain_summary(state: dict[str, Any]) -> str:
    """One line on the attempts (for a job's report): each one's selection mean and the one kept."""
    drives = ", ".join(f"attempt {a['attempt'] + 1} (seed {a['seed']}) {a['selection']['mean_return']:.1f}" for a in state["attempts"])
    k, n = len(state["attempts"]), len(state["attempts"][0]["selection"]["returns"])
    return (f"{k} attempt{'s' * (k != 1)} on {n} selection track{'s' * (n != 1)} (retrain below {state['below']:g}): {drives}; "
            f"kept attempt {state['chosen'] + 1}")
