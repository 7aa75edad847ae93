"""A study's progress bar: runs done and running, episodes driven, and an ETA from the times measured so far."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm import tqdm

from agents.studies.store import StudyFile


class Progress:
    """Which runs are done and running, episodes driven, and an ETA from the times measured so far."""

    def __init__(self, study: StudyFile, grid: list[str], asked: set[tuple[str, str, int]], capacity: int, quiet: bool) -> None:
        """grid: the run keys this command trains; asked: the (run, level, seed) episodes it drives, the expert's included."""
        self.study, self.grid, self.total_runs = study, grid, len(grid)
        self.asked, self.total_eps = set(asked), len(asked)
        self.capacity = max(1, min(capacity, 64))
        self.train_times: list[float] = []
        self.started = time.monotonic()
        self.eps_at_start = self.episodes_done()
        self.bar = tqdm(total=self.total_eps, initial=min(self.total_eps, self.eps_at_start), desc="study episodes", unit="ep", dynamic_ncols=True, disable=quiet)

    def trained(self, seconds: float) -> None:
        self.train_times.append(seconds)

    def driven(self) -> None:
        self.bar.update(1)

    def diverged(self, message: str, run: str) -> None:
        """A run that will not be driven: say why, and stop counting its episodes."""
        self.asked = {k for k in self.asked if k[0] != run}
        self.total_eps = len(self.asked)
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
        """Episodes this command asks for (an earlier invocation's other runs, levels and seeds are in study.json too)."""
        return len(self.asked & self.study.keys)

    def show(self, running: dict[Any, str]) -> None:
        training = sorted(v for v in running.values() if v != "episodes")
        eta = self.eta_minutes()
        self.bar.set_postfix_str(
            f"{self.summary()}; training: {', '.join(training) or '-'}; ETA {'?' if eta is None else f'{eta:.0f} min'}", refresh=True
        )

    def close(self) -> None:
        self.bar.close()
