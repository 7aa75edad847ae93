"""The one seam for parallel work: local processes by default, Ray tasks on a cluster.

Collection, DAgger rollouts, evaluation and studies submit plain functions of one picklable
argument and receive results as they finish; none of them starts a pool of its own.

- `workers == 1`: in this process, one task at a time (debuggable, no pickling).
- `workers > 1`: a `ProcessPoolExecutor`. A worker that dies (killed, out of memory) breaks the
  whole pool in the standard library; the pool is rebuilt and the unfinished tasks are resubmitted
  (each at most `retries` times), so a lost worker costs its task's time, never a result.
- `ray`: Ray tasks with their CPU / GPU needs declared (`ray.remote(...).options(num_cpus=...,
  num_gpus=..., max_retries=...)`); Ray reruns a task whose worker or node died. Ray is an optional
  dependency (`pip install nac-drive[cluster]`), imported only on this path.

A task's result arrives exactly once, with the key it was submitted under, so callers that keep
results by key (study.json) never count one twice, whichever path ran it.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator

from nac.config import ConfigError, need


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


@dataclass
class Task:
    key: Hashable  # how the caller recognises the result
    fn: Callable[[Any], Any]
    arg: Any
    cpus: float = 1.0  # what the task needs (Ray schedules by it; local workers run one task each)
    gpus: float = 0.0
    tries: int = 0


@dataclass
class ExecutorConfig:
    """Where parallel work runs."""

    workers: int = 0  # local processes; 0 = up to 2, 1 = in this process
    ray: str | None = None  # Ray cluster address ("auto", "ray://host:10001"), "local" for a new local instance; None: no Ray
    retries: int = 2  # a task whose worker died is run again up to this many times

    def __post_init__(self) -> None:
        need(self.workers >= 0, f"workers must be >= 0 (got {self.workers})")
        need(self.retries >= 0, f"retries must be >= 0 (got {self.retries})")


class Executor:
    """Submit tasks, then iterate `results()` to receive (key, result) as each finishes."""

    capacity: int = 1  # tasks that run at once; a caller that schedules its own queue keeps this many submitted

    def submit(self, task: Task) -> None:
        raise NotImplementedError

    def pending(self) -> int:
        raise NotImplementedError

    def next_result(self) -> tuple[Hashable, Any]:
        """Block until a task finishes; its (key, result). A task's own exception is raised here."""
        raise NotImplementedError

    def results(self) -> Iterator[tuple[Hashable, Any]]:
        while self.pending():
            yield self.next_result()

    def cancel(self) -> None:
        """Drop the tasks not started (on Ctrl-C)."""

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None:
            self.cancel()
        self.close()


class InlineExecutor(Executor):
    """One task at a time in this process, in submission order."""

    def __init__(self) -> None:
        self.queue: list[Task] = []

    def submit(self, task: Task) -> None:
        self.queue.append(task)

    def pending(self) -> int:
        return len(self.queue)

    def next_result(self) -> tuple[Hashable, Any]:
        task = self.queue.pop(0)
        return task.key, task.fn(task.arg)

    def cancel(self) -> None:
        self.queue.clear()


class ProcessExecutor(Executor):
    """Local worker processes; a broken pool is rebuilt and its unfinished tasks resubmitted."""

    def __init__(self, workers: int, retries: int) -> None:
        self.workers, self.retries, self.capacity = workers, retries, workers
        self.pool = ProcessPoolExecutor(max_workers=workers)
        self.running: dict[Future, Task] = {}

    def submit(self, task: Task) -> None:
        self.running[self.pool.submit(task.fn, task.arg)] = task

    def pending(self) -> int:
        return len(self.running)

    def next_result(self) -> tuple[Hashable, Any]:
        while True:
            done, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
            fut = next(iter(done))
            task = self.running.pop(fut)
            try:
                return task.key, fut.result()
            except BrokenProcessPool:
                self._rebuild(task)

    def _rebuild(self, first: Task) -> None:
        """A worker died: every unfinished future of this pool is broken. Rerun them on a new pool."""
        lost = [first, *self.running.values()]
        self.running.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = ProcessPoolExecutor(max_workers=self.workers)
        for task in lost:
            task.tries += 1
            if task.tries > self.retries:
                raise BrokenProcessPool(f"a worker died {task.tries} times running task {task.key!r}; giving up")
            self.submit(task)

    def cancel(self) -> None:
        for fut in self.running:
            fut.cancel()
        self.running.clear()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor(Executor):
    """Ray tasks: resources declared per task, retried by Ray when a worker or node is lost."""

    capacity = 10_000  # Ray queues and schedules by the declared resources: submit everything

    def __init__(self, address: str, retries: int) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install 'nac-drive[cluster]' (or pip install ray)") from None
        self.ray = ray
        if not ray.is_initialized():
            _check_reachable(address)
            try:
                ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({exc}); start one with 'ray start --head' "
                                  "and give its address, or --ray alone for a local instance") from None
        self.retries = retries
        self.running: dict[Any, Task] = {}
        self._call = ray.remote(_call)  # one remote function for every task: fn may be a partial, which ray.remote refuses

    def submit(self, task: Task) -> None:
        ref = self._call.options(num_cpus=task.cpus, num_gpus=task.gpus, max_retries=self.retries).remote(task.fn, task.arg)
        self.running[ref] = task

    def pending(self) -> int:
        return len(self.running)

    def next_result(self) -> tuple[Hashable, Any]:
        (ref,), _ = self.ray.wait(list(self.running), num_returns=1)
        task = self.running.pop(ref)
        try:
            return task.key, self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:  # the task's own exception, as it was raised
            raise exc.as_instanceof_cause() from None

    def cancel(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref)
        self.running.clear()

    def gpus_available(self) -> float:
        return float(self.ray.cluster_resources().get("GPU", 0.0))


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes: ray.init waits a long time for a head that is not there."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "local", "auto": Ray finds (or starts) the cluster itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address!r} ({exc}); start one with 'ray start --head' "
                          "and give its address, or --ray alone for a local instance") from None


def _call(fn: Callable[[Any], Any], arg: Any) -> Any:
    return fn(arg)


def make_executor(cfg: ExecutorConfig, tasks: int | None = None) -> Executor:
    """The executor `cfg` names; with `tasks` known, never more local workers than tasks."""
    if cfg.ray is not None:
        return RayExecutor(cfg.ray, cfg.retries)
    workers = cfg.workers or default_workers()
    if tasks is not None:
        workers = min(workers, max(1, tasks))
    return InlineExecutor() if workers <= 1 else ProcessExecutor(workers, cfg.retries)
