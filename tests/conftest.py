"""Shared fixtures: tiny demonstration sets recorded by the project's own collector; a lock for the
tests that start or stop Ray."""

import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

from agents.training.collect import CollectConfig, collect


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
