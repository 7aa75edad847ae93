"""A Ray cluster of two nodes on this machine, as on a real one: a head and a worker started with
`ray start`, each with its own temporary directory and one CPU. A study loses its worker node
midway (its raylet killed by its process id) and finishes with every run and episode, finished runs
not redone, nothing counted twice; a node that cannot see the study folder (in a private mount
namespace with an empty folder over it) is named before the first task; a node that is alive but slow to start
its workers is waited for, not refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nac.config import ConfigError
from tests.limits import seconds

pytest.importorskip("ray")  # the test extra installs it
RAY = str(Path(sys.executable).with_name("ray"))
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}  # a test cluster: no token to pass around
TINY = "base:epochs=1,dagger_rounds=1,dagger_episodes=1,dagger_epochs=1,val_fraction=0.3"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(args: list[str], prefix: list[str] | None = None) -> None:
    r = subprocess.run([*(prefix or []), RAY, "start", "--num-cpus", "1", "--disable-usage-stats", *args],
                       env=ENV, capture_output=True, text=True, timeout=seconds(180))
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]


def _raylet(temp_dir: Path) -> int:
    """The process id of the raylet whose temporary directory is `temp_dir`."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    pids = [int(line.split()[0]) for line in out.splitlines() if "raylet/raylet" in line and f"--temp_dir={temp_dir}" in line]
    assert len(pids) == 1, out
    return pids[0]


def _busy(raylet: int) -> bool:
    """Whether a worker of this raylet is running a task (Ray titles it ray::<function>)."""
    out = subprocess.run(["ps", "-ww", "-eo", "ppid,args"], capture_output=True, text=True).stdout
    return any(line.split(None, 1)[0] == str(raylet) and "ray::_call" in line for line in out.splitlines() if line.strip())


@pytest.fixture
def cluster(tmp_path, ray_alone):
    """(address, head temp dir, worker temp dir, start_worker): a head node is up; the worker joins on start_worker(prefix)."""
    port = _port()
    # short folders: a node's sockets live in them, and a Unix socket's path has at most 107 bytes
    head, worker = (Path(tempfile.mkdtemp(prefix=f"ray{name}", dir="/tmp")) for name in ("h", "w"))
    _ray_start(["--head", "--port", str(port), "--temp-dir", str(head), "--include-dashboard", "false",
                "--ray-client-server-port", str(_port())])
    address = f"127.0.0.1:{port}"
    try:
        yield address, head, worker, lambda prefix=None: _ray_start(["--address", address, "--temp-dir", str(worker)], prefix)
    finally:
        subprocess.run([RAY, "stop", "--force"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=seconds(120))
        shutil.rmtree(head, ignore_errors=True)
        shutil.rmtree(worker, ignore_errors=True)


def test_a_study_loses_its_worker_node_midway_and_finishes(cluster, tmp_path):
    address, _, worker_dir, start_worker = cluster
    start_worker()
    out = tmp_path / "study"
    cmd = [sys.executable, "-m", "scripts.cli", "study", "--heads", "nac", "lstm", "--seeds", "1", "--demos", "3", "--episodes", "2",
           "--seed-start", "100", "--max-steps", "40", "--variant", TINY, "--ray", address, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    raylet = _raylet(worker_dir)
    deadline = time.monotonic() + seconds(600)
    while not (list(out.glob("runs/base/*/seed0/config.json")) and _busy(raylet)):  # kill the worker node while it runs a task, training begun
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the worker node never ran a task: {proc.communicate()[1][-2000:] if proc.poll() is not None else 'timed out'}")
        time.sleep(0.2)
    study = out / "study.json"
    before = json.loads(study.read_text()) if study.is_file() else {"runs": {}, "episodes": []}
    os.kill(raylet, signal.SIGKILL)
    killed_at = time.time_ns()
    _, err = proc.communicate(timeout=seconds(900))
    assert proc.returncode == 0, err[-2000:]
    after = json.loads(study.read_text())
    assert sorted(after["runs"]) == ["base/lstm/seed0", "base/nac/seed0"] and all(r["done"] for r in after["runs"].values())
    keys = [(e["run"], e["level"], e["episode_seed"]) for e in after["episodes"]]
    assert len(keys) == len(set(keys)) == 6  # two runs and the expert, two held-out seeds each, each once
    assert after["episodes"][: len(before["episodes"])] == before["episodes"]
    for key, run in before["runs"].items():  # a run finished before the node was lost is not trained again
        if run.get("done"):
            assert (out / "runs" / key / "best.safetensors").stat().st_mtime_ns < killed_at


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="a private mount namespace needs unshare as root")
def test_a_node_that_cannot_see_the_study_folder_is_named_before_any_task(cluster, tmp_path):
    import ray

    from agents.driving.executor import ExecutorConfig, make_executor

    address, _, _, start_worker = cluster
    folder = tmp_path / "study"
    folder.mkdir()
    # the worker node's processes live in a mount namespace of their own, with an empty folder over the study folder
    start_worker(["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount -t tmpfs tmpfs {folder} && exec \"$0\" \"$@\""])
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        with pytest.raises(ConfigError, match=rf"cannot read {folder}/\.nacdrive-shared.*every node of a Ray cluster must see") as exc:
            make_executor(ExecutorConfig(ray=address, shared=(str(folder),)))
        alive = [n for n in ray.nodes() if n["Alive"]]
        [worker] = [n for n in alive if "node:__internal_head__" not in n["Resources"]]
        assert len(alive) == 2 and f"id {worker['NodeID'][:8]}" in str(exc.value) and "more" not in str(exc.value)  # the worker alone
    finally:
        ray.shutdown()
        os.environ.pop("RAY_AUTH_MODE", None)


# Python starts a Ray worker process through site, so a sitecustomize on the worker node's PYTHONPATH delays each of
# its workers as a busy node, or one installing a runtime environment, does
SLOW_START = """
import os, time
if b"default_worker.py" in open("/proc/self/cmdline", "rb").read():
    time.sleep(float(os.environ["SLOW_START_SECONDS"]))
"""


def test_a_node_slow_to_start_its_workers_is_waited_for_not_refused(cluster, tmp_path, capfd):
    import ray

    from agents.driving.executor import PROGRESS_SECONDS, ExecutorConfig, make_executor

    address, _, _, start_worker = cluster
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    delay = 3 * PROGRESS_SECONDS
    # the raylet would kill a worker that takes over a minute to register: the node's own limit, raised as a slow node's is
    start_worker(["env", f"PYTHONPATH={site}", f"SLOW_START_SECONDS={delay}", "RAY_worker_register_timeout_seconds=600"])
    started = time.monotonic()
    folder = tmp_path / "study"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        # a wait shorter than the node's start is refused, and the error names the node as alive and the setting to raise
        with pytest.raises(ConfigError, match=r"no answer in 2 s from [12] live node\(s\) about the job's folders: .*give --storage-wait more seconds") as exc:
            make_executor(ExecutorConfig(ray=address, shared=(str(folder),), storage_wait=2))
        alive = [n for n in ray.nodes() if n["Alive"]]
        [worker] = [n for n in alive if "node:__internal_head__" not in n["Resources"]]
        assert f"id {worker['NodeID'][:8]}" in str(exc.value) and "every node of a Ray cluster must see" not in str(exc.value)
        capfd.readouterr()
        # the default waits for it, saying which node it waits for, and passes once the node's workers are up
        make_executor(ExecutorConfig(ray=address, shared=(str(folder),)))
        assert time.monotonic() - started >= delay
        err = capfd.readouterr().err
        assert "waiting for 1 live node(s) to answer" in err and f"id {worker['NodeID'][:8]}" in err, err[-2000:]
    finally:
        ray.shutdown()
        os.environ.pop("RAY_AUTH_MODE", None)
