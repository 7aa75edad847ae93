"""Shared fixtures: tiny demonstration sets recorded by the project's own collector; a lock for the
tests that start or stop Ray; `--load N`, the suite on a loaded machine."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

from agents.training.collect import CollectConfig, collect


def pytest_addoption(parser):
    parser.addoption("--load", type=int, default=0, metavar="N",
                     help="run the suite beside N CPU-bound processes, as on a loaded machine; its time limits (tests/limits.py, "
                          "pytest-timeout's) scale by 1 + 2 N / cores unless NACDRIVE_TEST_SLOWDOWN says otherwise")


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its limit
def pytest_configure(config):
    load = config.getoption("--load")
    if not load or hasattr(config, "workerinput"):  # xdist's workers inherit the controller's load and its scale
        return
    os.environ.setdefault("NACDRIVE_TEST_SLOWDOWN", f"{1 + 2 * load / (os.cpu_count() or 1):g}")
    limit = config.getoption("timeout", None) or config.getini("timeout")
    if limit:
        config.option.timeout = float(limit) * float(os.environ["NACDRIVE_TEST_SLOWDOWN"])
    config._load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]


def pytest_unconfigure(config):
    for proc in getattr(config, "_load", []):
        proc.kill()
        proc.wait()


@pytest.fixture
def ray_alone():
    """Held while a test starts or stops Ray, so that no other test of this machine does meanwhile
    (pytest-xdist's other workers, another pytest run): `ray stop` stops every Ray process of the
    machine, and `ray.init()` joins the cluster `ray start` started last."""
    with FileLock(str(Path(tempfile.gettempdir()) / "nacdrive-tests-ray.lock")):
        yield


def _demos(tmp_path_factory, name: str, continuous: bool) -> str:
    out = tmp_path_factory.mktemp(name) / "demos"
    collect(CollectConfig(out=str(out), episodes=4, workers=1, max_steps=48, continuous=continuous))
    return str(out)


@pytest.fixture(scope="session")
def tiny_demos(tmp_path_factory) -> str:
    """4 discrete episodes of 48 steps by the track expert (seeds 0..3)."""
    return _demos(tmp_path_factory, "discrete", False)


@pytest.fixture(scope="session")
def tiny_demos_continuous(tmp_path_factory) -> str:
    """4 continuous episodes of 48 steps by the track expert (seeds 0..3)."""
    return _demos(tmp_path_factory, "continuous", True)
