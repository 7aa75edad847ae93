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

Storage on a cluster: tasks read and write their folders (demonstrations, run folders, a study's
folder) by path, so every node must see those folders at the same absolute path, as Ray Train's
`storage_path` asks (a shared filesystem: NFS, a cloud bucket mounted alike on every node). The
Ray path checks it before the first task (ExecutorConfig.shared): a task pinned to each node reads
a mark the driver wrote, and a node that cannot is named in a one-line error (docs/cluster.md).
A node that is alive but has not answered yet (busy, or still starting its workers or installing
their environment) is waited for, with a line of progress naming it, up to `storage_wait` seconds;
only a wrong answer, a node that died, or that wait running out refuses the work.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, NoReturn

from nac.config import ConfigError, need


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


@dataclass
class WorkItem:
    """One unit of parallel work: fn(arg) on some worker, its result returned under key."""

    key: Hashable  # how the caller recognises the result
    fn: Callable[[Any], Any]
    arg: Any
    cpus: float = 1.0  # what the task needs (Ray schedules by it; local workers run one task each)
    gpus: float = 0.0
    tries: int = 0


# How long the storage check waits for a live node's first answer: a node's first task waits for a worker process,
# which a busy node, or one installing a runtime environment, starts minutes late; a node that died is refused at once.
STORAGE_WAIT = 1800.0
PROGRESS_SECONDS = 10.0  # how often the storage check says which nodes it still waits for


@dataclass
class ExecutorConfig:
    """Where parallel work runs."""

    workers: int = 0  # local processes; 0 = up to 2, 1 = in this process
    ray: str | None = None  # Ray cluster address ("auto", "ray://host:10001"), "local" for a new local instance; None: no Ray
    retries: int = 2  # a task whose worker died is run again up to this many times
    shared: tuple[str, ...] = ()  # absolute folders the tasks read and write: on Ray, every node must see them (checked at start)
    storage_wait: float = STORAGE_WAIT  # seconds the storage check waits for a live node's answer

    def __post_init__(self) -> None:
        need(self.workers >= 0, f"workers must be >= 0 (got {self.workers})")
        need(self.retries >= 0, f"retries must be >= 0 (got {self.retries})")
        need(self.storage_wait > 0, f"storage-wait must be > 0 seconds (got {self.storage_wait})")


class Executor:
    """Submit tasks, then iterate `results()` to receive (key, result) as each finishes."""

    capacity: int = 1  # tasks that run at once; a caller that schedules its own queue keeps this many submitted

    def submit(self, task: WorkItem) -> None:
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
        self.queue: list[WorkItem] = []

    def submit(self, task: WorkItem) -> None:
        self.queue.append(task)

    def pending(self) -> int:
        return len(self.queue)

    def next_result(self) -> tuple[Hashable, Any]:
        task = self.queue.pop(0)
        return task.key, task.fn(task.arg)

    def cancel(self) -> None:
        self.queue.clear()


def one_thread() -> None:
    """A local worker's first act: one torch thread (one task a core). It is also what keeps a forked worker alive: once
    the parent has run a multi-threaded torch op (loading the PPO expert runs its CNN), the child's first parallel op waits
    forever on the OpenMP pool it inherited, and one thread never enters that pool."""
    import torch  # here, not at the top: the seam itself needs no torch

    torch.set_num_threads(1)


class ProcessExecutor(Executor):
    """Local worker processes; a broken pool is rebuilt and its unfinished tasks resubmitted."""

    def __init__(self, workers: int, retries: int) -> None:
        self.workers, self.retries, self.capacity = workers, retries, workers
        self.pool = self._new_pool()
        self.running: dict[Future, WorkItem] = {}

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, initializer=one_thread)

    def submit(self, task: WorkItem) -> None:
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

    def _rebuild(self, first: WorkItem) -> None:
        """A worker died: every unfinished future of this pool is broken. Rerun them on a new pool."""
        lost = [first, *self.running.values()]
        self.running.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new_pool()
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
        self.running: dict[Any, WorkItem] = {}
        self._call = ray.remote(_call)  # one remote function for every task: fn may be a partial, which ray.remote refuses

    def submit(self, task: WorkItem) -> None:
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

    def check_shared(self, folders: list[Path], wait: float = STORAGE_WAIT) -> None:
        """Every live node sees each folder at the same path and can write there, or a ConfigError naming the first node
        that cannot (one task pinned to each node, needing no CPU). A live node that has not answered yet is waited for up
        to `wait` seconds, a line of progress on stderr naming it every PROGRESS_SECONDS; a wrong answer, or a node that
        dies before answering, refuses at once."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        token = uuid.uuid4().hex
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / SHARED_MARK).write_text(token)
        asked = {}
        for node in (n for n in self.ray.nodes() if n.get("Alive")):
            for folder in folders:
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                ref = self._call.options(num_cpus=0, scheduling_strategy=strategy, max_retries=0).remote(_sees, (str(folder), token))
                asked[ref] = (node, folder)
        def refuse(message: str) -> NoReturn:
            for ref in asked:  # the checks not answered yet
                self.ray.cancel(ref)
            raise ConfigError(message)

        start = said = time.monotonic()
        while asked:
            done, _ = self.ray.wait(list(asked), num_returns=len(asked), timeout=min(1.0, wait))
            problems = []
            for ref in done:
                node, folder = asked.pop(ref)
                try:
                    host, wrong = self.ray.get(ref)
                except Exception as exc:  # the node died or could not run the check
                    host, wrong = node.get("NodeManagerHostname", "?"), f"the check failed ({type(exc).__name__})"
                if wrong:
                    problems.append(f"{_node_name(node, host)}: {wrong}")
            if problems:
                refuse(f"{problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; every node of a Ray cluster "
                       "must see the folders the tasks use at the same absolute path (a shared filesystem; docs/cluster.md)")
            alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
            for node, folder in asked.values():
                if node["NodeID"] not in alive:
                    refuse(f"{_node_name(node)} died before it answered whether it sees {folder}; start it again, or leave it out "
                           "of the cluster")
            now = time.monotonic()
            waiting = list(dict.fromkeys(_node_name(node) for node, _ in asked.values()))
            if asked and now - start >= wait:
                refuse(f"no answer in {wait:g} s from {len(waiting)} live node(s) about the job's folders: {', '.join(waiting)}; "
                       "a node that is only busy or still starting its workers answers later: give --storage-wait more seconds")
            if asked and now - said >= PROGRESS_SECONDS:
                said = now
                print(f"storage check: {now - start:.0f} s, waiting for {len(waiting)} live node(s) to answer (up to --storage-wait "
                      f"{wait:.0f} s): {', '.join(waiting)}", file=sys.stderr, flush=True)


def _node_name(node: dict[str, Any], host: str | None = None) -> str:
    host = host or node.get("NodeManagerHostname", "?")
    return f"node {node.get('NodeManagerAddress')} ({host}, id {node['NodeID'][:8]})"


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes: ray.init waits a long time for a head that is not there."""
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


SHARED_MARK = ".nacdrive-shared"  # the file a storage check writes in each shared folder, and each node reads


def storage_path(path: str | Path, ray: str | None) -> str:
    """A folder as tasks should get it: absolute on Ray (a node's working directory is not the
    driver's), as given otherwise."""
    return str(Path(path).resolve()) if ray is not None else str(path)


def _sees(job: tuple[str, str]) -> tuple[str, str | None]:
    """On one node: whether it sees the folder `path` with the driver's mark in it and can write
    there -> (this host's name, None or what is wrong)."""
    path, token = job
    mark = Path(path) / SHARED_MARK
    try:
        seen = mark.read_text()
    except OSError as exc:
        return socket.gethostname(), f"cannot read {mark} ({exc.strerror or exc})"
    if seen != token:
        return socket.gethostname(), f"{path} there is another folder (its {SHARED_MARK} is not the driver's)"
    probe = Path(path) / f"{SHARED_MARK}-{uuid.uuid4().hex}"
    try:
        probe.write_text(token)
        probe.unlink()
    except OSError as exc:
        return socket.gethostname(), f"cannot write in {path} ({exc.strerror or exc})"
    return socket.gethostname(), None


def make_executor(cfg: ExecutorConfig, tasks: int | None = None) -> Executor:
    """The executor `cfg` names; with `tasks` known, never more local workers than tasks. On Ray,
    every node is checked to see cfg.shared first."""
    if cfg.ray is not None:
        ex = RayExecutor(cfg.ray, cfg.retries)
        if cfg.shared:
            ex.check_shared([Path(p) for p in cfg.shared], cfg.storage_wait)
        return ex
    workers = cfg.workers or default_workers()
    if tasks is not None:
        workers = min(workers, max(1, tasks))
    return InlineExecutor() if workers <= 1 else ProcessExecutor(workers, cfg.retries)
